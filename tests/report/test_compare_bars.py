"""compare's time_cost.png and breakdown.png: with four designs of long names the names under the
bars never run into each other (at 12 inches wide two panels of four wrapped names overlapped)."""

import pytest

import scalesim.report.comparison as comparison

NAMES = ["8x RTX 4090 (PCIe 4.0, no P2P), DDP, GPT-2 350M", "8x A100 80GB SXM (DGX A100, NVSwitch), DDP, GPT-2 350M",
         "8x H100 SXM (DGX H100, NVSwitch), DDP, GPT-2 350M", "32x RTX 4090 (4 nodes, 100 GbE), DDP, GPT-2 350M",
         "16x L40S (2 nodes, 400G RoCE), FSDP, GPT-2 350M", "8x MI300X (Infinity Fabric mesh), DDP, GPT-2 350M"]
SAME_HARDWARE = [f"8x H100 SXM (DGX H100, NVSwitch), {plan}, GPT-2 350M" for plan in ("DDP", "FSDP", "ZeRO-1", "TP2")]


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


def test_designs_on_the_same_hardware_keep_their_whole_names_apart(monkeypatch, tmp_path):
    """Under the bars a design is named by its hardware where that tells the designs apart; four
    plans on one DGX H100 keep their whole names, still without overlap."""
    figures = []
    monkeypatch.setattr(comparison, "save_figure", lambda fig, path, **kw: figures.append(fig) or fig.tight_layout())
    comparison.time_cost_plot([_row(n, k) for k, n in enumerate(SAME_HARDWARE)], tmp_path / "p.png")
    comparison.time_cost_plot([_row(n, k) for k, n in enumerate(NAMES[:4])], tmp_path / "q.png")
    same, different = figures
    for fig in figures:
        fig.canvas.draw()
    names = [" ".join(t.get_text().split()) for t in same.axes[0].get_xticklabels()]
    assert names == SAME_HARDWARE
    renderer = same.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in same.axes[0].get_xticklabels()]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    assert [" ".join(t.get_text().split()) for t in different.axes[0].get_xticklabels()] == [
        "8x RTX 4090", "8x A100 80GB SXM", "8x H100 SXM", "32x RTX 4090"]
