"""compare's pareto.png: each point's label stays inside the axes (a label at the right edge ran
under the legend) and the legend names the Pareto front only when there is one."""

import scalesim.report.comparison as comparison


def _row(name, hours, cloud, owned, fits=True):
    return {"scenario": name, "fits": fits, "time_to_train_s": hours * 3600, "cost_usd": cloud,
            "on_prem_cost_usd": owned}


def _drawn(monkeypatch, tmp_path, rows):
    figures = []
    monkeypatch.setattr(comparison, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    comparison.pareto_plot(rows, tmp_path / "pareto.png")
    fig = figures[0]
    fig.canvas.draw()
    return fig.axes[0], fig.canvas.get_renderer()


def test_labels_near_the_right_edge_stay_inside_the_axes(monkeypatch, tmp_path):
    rows = [_row("1x RTX 4090, full fine-tune GPT-3 6.7B", 8.29, 3.11, 7.37, fits=False),
            _row("8x RTX 4090, full fine-tune GPT-3 6.7B", 7.35, 22.05, 10.54, fits=False)]
    ax, renderer = _drawn(monkeypatch, tmp_path, rows)
    right = ax.get_window_extent(renderer).x1
    for label in ax.texts:
        assert label.get_window_extent(renderer).x1 <= right, label.get_text()


def test_the_legend_names_a_pareto_front_only_when_a_design_fits(monkeypatch, tmp_path):
    rows = [_row("1x RTX 4090", 8.29, 3.11, 7.37, fits=False), _row("8x RTX 4090", 7.35, 22.05, 10.54, fits=False)]
    ax, _ = _drawn(monkeypatch, tmp_path, rows)
    assert not any("Pareto" in t.get_text() for t in ax.get_legend().get_texts())
    ax, _ = _drawn(monkeypatch, tmp_path, [_row("8x A100", 4.8, 74.6, 40.0), _row("8x H100", 2.1, 52.8, 30.9)])
    assert any("Pareto" in t.get_text() for t in ax.get_legend().get_texts())
