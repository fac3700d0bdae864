"""The claims page's log axes are labelled in plain numbers (0.01, 20, 100), as the other plots' are,
not 10^-2 (ux15b; report/figures.py plain_log_axis)."""

import pytest

from scalesim.report import claim_plots

GiB = 2.0 ** 30
XS = [0.35e9, 1.3e9, 6.7e9, 30e9, 70e9]


@pytest.fixture
def figures(monkeypatch):
    drawn = []
    monkeypatch.setattr(claim_plots, "save", lambda fig, path: drawn.append(fig) or path)
    return drawn


def _labels(fig) -> list[str]:
    fig.canvas.draw()
    return [t.get_text() for ax in fig.axes for t in ax.get_yticklabels(which="both") if t.get_text()]


def test_fit_size_and_largest_model_plots_have_plain_log_tick_labels(figures, tmp_path):
    claim_plots.fit_plot(tmp_path / "a.png", XS, {"1 GPU": [n * 16 * GiB / 1e9 for n in XS], "8 GPUs": [
        None, 2 * GiB, 8 * GiB, 30 * GiB, 70 * GiB]}, 24 * GiB, 6e9)
    claim_plots.size_plot(tmp_path / "b.png", XS, [({"8x 4090": [0.002, 0.01, 0.05, 0.2, 0.4]}, "USD", "rent", 3),
                                                   ({"8x 4090": [0.1, 1.0, 10.0, 100.0, 2000.0]}, "days", "time", None)])
    claim_plots.largest_model_plot(tmp_path / "c.png", ["RTX 4090", "H100"], (1, 8), {"full": "full", "lora": "LoRA"},
                                   {(c, g, m): b for c, b0 in (("RTX 4090", 1.3), ("H100", 3.2)) for g in (1, 8)
                                    for m, b in (("full", b0 * g), ("lora", 8 * b0 * g))}, 70)
    assert len(figures) == 3
    for fig in figures:
        labels = _labels(fig)
        assert labels and not [t for t in labels if "10^" in t or "times" in t], labels
    assert "0.01" in _labels(figures[1]) and "100" in _labels(figures[1])
