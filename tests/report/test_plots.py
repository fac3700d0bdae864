"""Plot helpers: what is drawn matches what the eye can resolve."""

from scalesim.report.plots import _merge_spans


def test_spans_closer_than_the_gap_are_drawn_as_one_and_distant_ones_stay_apart():
    bars = [(0.0, 1.0), (1.05, 1.0), (5.0, 1.0)]
    assert _merge_spans(bars, 0.1) == [(0.0, 2.05), (5.0, 1.0)]
    assert _merge_spans(bars, 0.0) == bars


def test_host_bound_stretches_are_drawn_and_named_in_the_legend(tmp_path, monkeypatch):
    import matplotlib.axes

    from scalesim.engine import simulate
    from scalesim.program import ComputeTask, Program
    from scalesim.report.plots import timeline_plot

    labels = []
    legend = matplotlib.axes.Axes.legend
    monkeypatch.setattr(matplotlib.axes.Axes, "legend",
                        lambda self, handles, names, **kw: labels.extend(names) or legend(self, handles, names, **kw))
    kernels = lambda host_s: tuple(ComputeTask(f"k{i}", "forward", 1e-6, deps=(i - 1,) if i else (), host_s=host_s)
                                   for i in range(5))
    timeline_plot(simulate(Program({0: kernels(10e-6)}, ())), tmp_path / "bound.png", "host-bound")
    assert "waiting for host" in labels
    labels.clear()
    timeline_plot(simulate(Program({0: kernels(0.0)}, ())), tmp_path / "free.png", "no host cost")
    assert labels and "waiting for host" not in labels
