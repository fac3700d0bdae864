"""The sweep's best-plan figure (best.png): labels stay in their panel, the log axis of time
(hours under a day, else days) carries numbers to read the points by, and a sweep where nothing
fits says so instead of drawing empty axes with made-up ticks."""

import warnings

import pytest

import scalesim.report.sweep_table as sweep_table


def _drawn(monkeypatch, tmp_path, best):
    figures = []
    monkeypatch.setattr(sweep_table, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sweep_table.best_plan_plot({"scenario": "64x H100, Llama 3 70B", "rank_by": "time", "search": True,
                                    "best": best}, tmp_path / "best.png")
    fig = figures[0]
    fig.canvas.draw()
    return fig, fig.canvas.get_renderer(), [str(w.message) for w in caught]


def _ok(gpus, days, plan):
    return {"gpus": gpus, "status": "ok", "plan": plan, "tokens_per_s_per_gpu": 1000.0, "samples_per_s": 1.0,
            "time_to_train_s": 86400 * days, "cost_usd": 1.2e6, "on_prem_cost_usd": 8e5}


LONG = "dp8 tp4 pp4 zero2 mb1 offload-opt"    # what a search proposes at 128 H100s


def test_plan_labels_do_not_run_into_the_next_panel(monkeypatch, tmp_path):
    fig, renderer, _ = _drawn(monkeypatch, tmp_path, [_ok(64, 290.0, LONG), _ok(128, 150.0, LONG)])
    throughput = fig.axes[0]
    right = throughput.get_window_extent(renderer).x1
    for label in throughput.texts:
        assert label.get_window_extent(renderer).x1 <= right, f"{label.get_text()} leaves its panel"


def test_days_within_one_decade_still_get_two_numbers_on_the_axis(monkeypatch, tmp_path):
    fig, _, _ = _drawn(monkeypatch, tmp_path, [_ok(64, 256.6, "a"), _ok(128, 132.2, "b")])
    days = fig.axes[1]
    low, high = days.get_ylim()
    shown = [t for t in days.get_yticklabels(minor=True) + days.get_yticklabels()
             if t.get_text() and low <= t.get_position()[1] <= high]
    assert len(shown) >= 2, [t.get_text() for t in shown]


@pytest.mark.parametrize("search", [True, False])
def test_a_sweep_where_nothing_fits_says_so_without_empty_axes(monkeypatch, tmp_path, search):
    best = [{"gpus": 12, "status": "none", "reason": "global_batch (128) is not a multiple of dp (12)"}]
    fig, _, caught = _drawn(monkeypatch, tmp_path, best)
    assert not caught, caught
    for ax in fig.axes:
        assert any("no plan" in t.get_text() for t in ax.texts)
        assert not ax.get_yticklabels() or not any(t.get_text() for t in ax.get_yticklabels())


@pytest.mark.parametrize("days, unit, values", [((0.64, 0.31), "hours", (15.4, 7.4)),
                                                ((256.6, 132.2), "days", (256.6, 132.2))])
def test_time_to_train_is_in_the_unit_the_table_uses(monkeypatch, tmp_path, days, unit, values):
    """The table prints 15.43 h for a time under a day (format_time); the plot said 0.64 days."""
    fig, _, _ = _drawn(monkeypatch, tmp_path, [_ok(64, days[0], "a"), _ok(128, days[1], "b")])
    axis = fig.axes[1]
    assert f"({unit}," in axis.get_ylabel()
    assert [round(y, 1) for y in axis.lines[0].get_ydata()] == list(values)


def test_time_within_a_decade_is_drawn_from_zero_and_a_wider_span_on_a_log_axis(monkeypatch, tmp_path):
    # 8 and 16 RTX 4090s: 9.65 h and 10.85 h filled the whole panel on a log axis cut to the data,
    # a 12% difference drawn as the panel's height
    fig, _, _ = _drawn(monkeypatch, tmp_path, [_ok(8, 9.65 / 24, "dp8 mb8"), _ok(16, 10.85 / 24, "dp16 mb8")])
    hours = fig.axes[1]
    assert hours.get_yscale() == "linear" and hours.get_ylim()[0] == 0
    assert "log" not in hours.get_ylabel()
    fig, _, _ = _drawn(monkeypatch, tmp_path, [_ok(8, 40.0, "a"), _ok(1024, 0.5, "b")])
    assert fig.axes[1].get_yscale() == "log" and "log scale" in fig.axes[1].get_ylabel()
