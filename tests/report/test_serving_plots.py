"""serve's latency plots: a log axis of seconds reads as plain numbers (0.02, 0.03, not 3x10^-2),
and the SLO line says its value."""

import pytest

import scalesim.report.serving as serving


def _points():
    return [{"rate_per_s": rate, "output_tokens_per_s": 200.0 * rate,
             "ttft_s": {"p50": 0.06 * rate, "p90": 0.1 * rate, "p99": 0.15 * rate},
             "tpot_s": {"p50": 0.019 + 0.002 * rate, "p90": 0.020 + 0.0025 * rate, "p99": 0.021 + 0.003 * rate},
             "e2e_latency_s": {"p50": 4.0 + rate, "p90": 8.0 + rate, "p99": 12.0 + 2 * rate}} for rate in (1, 2, 4, 8)]


def _figures(monkeypatch):
    figures = []
    monkeypatch.setattr(serving, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    return figures


def _labels(ax):
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]


def test_latency_axes_read_as_plain_numbers(monkeypatch, tmp_path):
    figures = _figures(monkeypatch)
    r = {"scenario": "1x RTX 4090", "sweep": _points(), "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}
    serving.percentiles_plot(r, tmp_path / "p.png")
    serving.latency_throughput_plot([r], tmp_path / "l.png")
    axes = figures[0].axes + figures[1].axes
    for ax in axes:
        labels = _labels(ax)
        assert len(labels) >= 2, labels
        assert not any("10^" in t or "times" in t for t in labels), labels


def test_the_slo_line_says_its_value(monkeypatch, tmp_path):
    figures = _figures(monkeypatch)
    r = {"scenario": "1x RTX 4090", "sweep": _points(), "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}
    serving.percentiles_plot(r, tmp_path / "p.png")
    names = [t.get_text() for ax in figures[0].axes for t in ax.get_legend().get_texts()]
    assert any("SLO" in n and "1 s" in n for n in names) and any("SLO" in n and "50 ms" in n for n in names), names


@pytest.mark.parametrize("tpot", [[(0.0124, 0.0131, 0.01355), (0.0137, 0.0149, 0.0160), (0.0183, 0.0205, 0.0227)],
                                  [(0.0124, 0.0131, 0.01355), (0.0183, 0.0205, 0.0227), (0.0499, 0.062, 0.0704)]])
def test_every_point_has_a_labelled_tick_near_it(monkeypatch, tmp_path, tpot):
    """TPOT of 12-23 ms under a 50 ms SLO: the axis labelled only 20, 30, 40 and 50, and the lowest
    points, a third of the panel below 20, had no number to be read by (12-70 ms: 20, 30, 50)."""
    figures = _figures(monkeypatch)
    sweep = [{"rate_per_s": rate, "output_tokens_per_s": 230.0 * rate,
              "ttft_s": {"p50": 0.05, "p90": 0.085, "p99": 0.14}, "tpot_s": dict(zip(("p50", "p90", "p99"), t)),
              "e2e_latency_s": {"p50": 3.0, "p90": 6.0, "p99": 9.5}} for rate, t in zip((2, 4, 8), tpot)]
    serving.percentiles_plot({"scenario": "2x RTX 4090", "sweep": sweep, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}},
                             tmp_path / "p.png")
    ax = figures[0].axes[1]
    _labels(ax)
    low, high = ax.get_ylim()
    ticks = [t.get_position()[1] for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)
             if t.get_text() and low <= t.get_position()[1] <= high]
    for line in ax.get_lines():
        for y in line.get_ydata():
            assert min(max(y / t, t / y) for t in ticks) <= 1.3, (y, sorted(ticks))


def _row(name, latency, cloud, owned):
    return {"scenario": name, "e2e_p50_s": latency, "usd_per_million_tokens": cloud,
            "owned_usd_per_million_tokens": owned}


def test_the_serving_pareto_keeps_labels_inside_and_one_colour_per_design(monkeypatch, tmp_path):
    """Labels of the slowest design ran past the right edge, and a design's rented and owned points
    had two unrelated colours."""
    figures = _figures(monkeypatch)
    rows = [_row("1x RTX 4090, Llama 3 8B bf16, vLLM-style", 6.85, 0.087, 0.205),
            _row("1x H100 PCIe, Llama 3 8B bf16, vLLM-style", 8.53, 0.158, 0.108),
            _row("2x RTX 4090, Llama 3 8B, vLLM-style", 9.57, 0.074, 0.104)]
    front = [{"scenario": rows[0]["scenario"], "kind": "cloud"}, {"scenario": rows[2]["scenario"], "kind": "cloud"}]
    serving.serving_pareto_plot(rows, front, tmp_path / "p.png")
    ax = figures[0].axes[0]
    figures[0].canvas.draw()
    renderer = figures[0].canvas.get_renderer()
    right = ax.get_window_extent(renderer).x1
    assert len(ax.texts) == 6
    for label in ax.texts:
        assert label.get_window_extent(renderer).x1 <= right, label.get_text()
    colours = [tuple(c.get_facecolor()[0]) for c in ax.collections]
    assert colours[0] == colours[1] and colours[2] == colours[3] and colours[0] != colours[2]
    assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0


def test_labels_of_points_at_nearly_the_same_place_do_not_cover_each_other(monkeypatch, tmp_path):
    figures = _figures(monkeypatch)
    rows = [_row("1x RTX 4090, Llama 3 8B bf16", 6.85, 0.087, 0.205),
            _row("2x RTX 4090, Llama 3 8B", 7.52, 0.077, 0.108),
            _row("1x H100 PCIe, Llama 3 8B bf16", 7.47, 0.161, 0.110)]
    serving.serving_pareto_plot(rows, [], tmp_path / "p.png")
    fig = figures[0]
    fig.canvas.draw()
    boxes = [t.get_window_extent(fig.canvas.get_renderer()) for t in fig.axes[0].texts]
    assert not [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]


def test_the_search_probes_on_fewer_requests_are_never_joined_to_the_full_runs(monkeypatch, tmp_path):
    """The rate search probes on the first 400 requests; its points used to share one line with the
    full load's runs, a saw-tooth no load makes (throughput falling as the rate rose)."""
    figures = _figures(monkeypatch)
    sweep = [{**p, "requests": 400 if p["rate_per_s"] in (1, 8) else 1000, "kv_cache_peak_fraction": 0.1,
              "preemptions": 0, "meets_slo": True, "cost_per_million_tokens_usd": {"cloud": 1.0}} for p in _points()]
    r = {"scenario": "1x H100", "sweep": sweep, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}
    serving.percentiles_plot(r, tmp_path / "p.png")
    serving.latency_throughput_plot([r], tmp_path / "l.png")
    for ax in figures[0].axes + figures[1].axes:
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            if len(xs) > 1 and line.get_linestyle() not in ("None", "none", "") and "SLO" not in line.get_label():
                # a joined line holds the full runs only: rates 2 and 4 (tokens/s 400 and 800)
                assert sorted(xs) in ([2, 4], [400.0, 800.0]), xs
    table = serving.sweep_table(r)
    assert [c.header for c in table.columns][1] == "requests"
    assert "probes" in str(table.caption)


def test_the_acronyms_are_spelled_out_in_the_tables_and_on_the_axes(monkeypatch, tmp_path):
    # TTFT, TPOT, KV peak and $/M cloud were printed with no word of explanation anywhere serve prints them
    figures = _figures(monkeypatch)
    sweep = [{**p, "requests": 300, "kv_cache_peak_fraction": 0.1, "preemptions": 0, "meets_slo": True,
              "cost_per_million_tokens_usd": {"cloud": 1.0}} for p in _points()]
    r = {"scenario": "1x RTX 4090", "sweep": sweep, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}}
    serving.percentiles_plot(r, tmp_path / "p.png")
    ttft, tpot = figures[0].axes
    assert "time to first token" in ttft.get_ylabel() and "time per output token" in tpot.get_ylabel()
    caption = str(serving.sweep_table(r).caption)
    for words in ("rate/s: requests offered per second", "TTFT: time to first token", "TPOT: time per output token", "KV peak:", "preempt:", "$/M cloud:"):
        assert words in caption, words


def test_the_serving_comparison_spells_out_its_acronyms():
    rows = [{"scenario": "a", "gpus": 1, "gpu": "rtx4090", "plan": {"tp": 1, "pp": 1, "weights": "bf16"}, "fits": True,
             "max_rate_under_slo": 6.4, "output_tokens_per_s": 1204.0, "ttft_p99_s": 0.5, "tpot_p99_s": 0.04,
             "e2e_p50_s": 6.9, "cloud_usd_per_m_tokens": 0.087, "owned_usd_per_m_tokens": 0.08}]
    caption = str(serving.serving_compare_table(rows).caption)
    assert "TTFT: time to first token" in caption and "TPOT: time per output token" in caption
