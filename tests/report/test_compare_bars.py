"""compare's time_cost.png and breakdown.png: with four designs of long names the names under the
bars never run into each other (at 12 inches wide two panels of four wrapped names overlapped)."""

import pytest

import scalesim.report.comparison as comparison

NAMES = ["8x RTX 4090 (PCIe 4.0, no P2P), DDP, GPT-2 350M", "8x A100 80GB SXM (DGX A100, NVSwitch), DDP, GPT-2 350M",
         "8x H100 SXM (DGX H100, NVSwitch), DDP, GPT-2 350M", "32x RTX 4090 (4 nodes, 100 GbE), DDP, GPT-2 350M",
         "16x L40S (2 nodes, 400G RoCE), FSDP, GPT-2 350M", "8x MI300X (Infinity Fabric mesh), DDP, GPT-2 350M"]


def _row(name, k):
    parts = {"compute": 0.3, "exposed_comm": 0.1 * k, "bubble": 0.0, "other": 0.01}
    return {"scenario": name, "fits": True, "time_to_train_s": 3600.0 * (k + 1), "cost_usd": 20.0 + k,
            "on_prem_cost_usd": 10.0 + k, "step_time_s": sum(parts.values()), "breakdown_s": parts}


@pytest.mark.parametrize("plot", ["time_cost_plot", "breakdown_plot"])
@pytest.mark.parametrize("count", [2, 4, 6])
def test_design_names_under_the_bars_do_not_overlap(monkeypatch, tmp_path, plot, count):
    figures = []
    def keep(fig, path, tight_layout=True, **kw):          # laid out as save_figure lays it out
        if tight_layout:
            fig.tight_layout()
        figures.append(fig)
        return path

    monkeypatch.setattr(comparison, "save_figure", keep)
    getattr(comparison, plot)([_row(n, k) for k, n in enumerate(NAMES[:count])], tmp_path / "p.png")
    fig = figures[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) == count
        for left, right in zip(boxes, boxes[1:]):
            assert left.x1 < right.x0, (plot, count, left, right)
