"""A plot title longer than its figure wraps onto a second line instead of being cut off at both edges."""

from scalesim.report.figures import fit_title, new_figure


def test_a_long_title_wraps_and_fits_the_figure_and_a_short_one_stays_on_one_line():
    fig, ax = new_figure((6.5, 4.2))
    long = "2x RTX 4090, FSDP + QLoRA + CPU offload, Llama 2 70B: scaling efficiency"
    text = fit_title(ax, long)
    assert "\n" in text.get_text() and text.get_text().replace("\n", " ") == long
    assert text.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width
    fig, ax = new_figure((6.5, 4.2))
    assert "\n" not in fit_title(ax, "8x H100: scaling efficiency").get_text()
