"""Timeline rows name streams in words, as the other rows do ("compute", "comm", "pp send/recv"),
never by a planner's internal identifier."""

from scalesim.engine import simulate
from scalesim.parallel.fsdp import POST_BACKWARD_STREAM
from scalesim.parallel.fsdp_limiter import UNSHARD_STREAM
from scalesim.program import COMM_STREAM, COMPUTE_STREAM, ComputeTask, Program


def test_fsdp1s_streams_are_drawn_under_user_facing_labels(tmp_path, monkeypatch):
    import scalesim.report.timeline_plot as timeline_plot

    figures = []
    monkeypatch.setattr(timeline_plot, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    streams = (COMPUTE_STREAM, COMM_STREAM, POST_BACKWARD_STREAM, UNSHARD_STREAM, "pp_send_next", "offload")
    tasks = tuple(ComputeTask(f"k{i}", "other", 1e-6, deps=(i - 1,) if i else (), stream=s)
                  for i, s in enumerate(streams))
    timeline_plot.timeline_plot(simulate(Program({0: tasks}, ())), tmp_path / "t.png", "streams")
    rows = [t.get_text() for t in figures[0].axes[0].get_yticklabels()]
    assert len(rows) == len(streams)
    assert not [r for r in rows if "_" in r], rows
    assert any(r.endswith("fsdp post-backward") for r in rows) and any(r.endswith("pp send/recv") for r in rows)
