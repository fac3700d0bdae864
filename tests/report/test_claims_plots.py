"""scalesim.report.claim_plots: the claims page's figures are repeatable byte for byte and leave the
process's matplotlib style alone."""

import matplotlib

from scalesim.report.claim_plots import fit_plot, params_axis, scaling_panels_plot

GiB = 2.0**30


def test_the_same_figure_gives_the_same_bytes_and_no_software_tag(tmp_path):
    style = dict(matplotlib.rcParams)
    xs = [0.4e9, 1.4e9, 6.7e9]
    need = {"plain": [10 * GiB, 30 * GiB, None], "offload": [4 * GiB, 9 * GiB, 40 * GiB]}
    a = fit_plot(tmp_path / "a.png", xs, need, 24 * GiB, 6e9).read_bytes()
    b = fit_plot(tmp_path / "b.png", xs, need, 24 * GiB, 6e9).read_bytes()
    assert a == b and a.startswith(b"\x89PNG") and b"matplotlib" not in a
    assert dict(matplotlib.rcParams) == style


def test_scaling_panels_draw_a_panel_per_design(tmp_path):
    curves = {"servers A": {"m1": {1: 1.0, 8: 0.9}}, "servers B": {"m1": {1: 1.0, 8: 0.95}}}
    path = scaling_panels_plot(tmp_path / "s.png", [1, 8], curves, {"m1"}, "efficiency (%)")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_parameter_axis_labels_only_ticks_inside_the_data():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    params_axis(ax, [0.5e9, 7e9])
    labels = [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    assert labels == ["0.5B", "1B", "2B", "5B"]
