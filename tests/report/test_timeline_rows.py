"""The timeline plot's rows and bars, worked out on columns (report/timeline_rows.py)."""

from scalesim.report.timeline_rows import bar_spans, columns, identical_ranks, rows_of
from scalesim.timeline import Interval, Timeline

COLOURS = {"forward": "blue", "backward": "green", "comm": "orange", "waiting for host": "grey"}


def _timeline(*intervals) -> Timeline:
    return Timeline(tuple(Interval(*iv) for iv in intervals), max(iv[6] for iv in intervals), 0.0, 0.0)


def test_ranks_alike_in_count_and_span_but_not_in_every_interval_are_drawn_apart():
    same = [("compute", "f", "forward", 0.0, 0.0, 1.0), ("compute", "b", "backward", 1.0, 1.0, 3.0)]
    inner = [("compute", "f", "forward", 0.0, 0.0, 2.0), ("compute", "b", "backward", 2.0, 2.0, 3.0)]
    timeline = _timeline(*[(r, *iv) for r in (0, 2) for iv in same], *[(1, *iv) for iv in inner],
                         (3, "compute", "f", "forward", 0.0, 0.0, 3.0))
    shown, names = identical_ranks(columns(timeline), [0, 1, 2, 3], str)
    assert shown == {0, 1, 3}
    assert names == {0: "GPU 0 (x2, identical)", 1: "GPU 1", 3: "GPU 3"}


def test_bars_keep_the_timelines_order_per_row_and_colour_and_a_late_kernel_adds_its_wait_after_it():
    timeline = _timeline((0, "compute", "f0", "forward", 0.0, 0.5, 1.0),       # issued late: waits 0-0.5
                         (0, "tp", "ar", "all_reduce", 1.0, 1.0, 2.0),            # no colour of its own: comm
                         (0, "compute", "b0", "backward", 2.0, 2.0, 3.0),
                         (0, "compute", "f1", "forward", 3.0, 3.0, 3.5),
                         (1, "compute", "f0", "forward", 0.0, 0.0, 1.0),          # not shown
                         (0, "compute", "empty", "forward", 4.0, 4.0, 4.0))      # no width: no bar
    cols = columns(timeline)
    rows = rows_of(cols, {0}, str)
    assert rows == [(0, "compute"), (0, "tp")]
    row_of = {row: y for y, row in enumerate(rows)}
    spans, used = bar_spans(cols, {0}, lambda rank, stream: row_of[(rank, stream)], COLOURS,
                            ("forward", "backward"), "waiting for host", "comm")
    assert list(spans) == [(0, "blue"), (0, "grey"), (1, "orange"), (0, "green")]
    assert {k: (lo.tolist(), hi.tolist()) for k, (lo, hi) in spans.items()} == {
        (0, "blue"): ([0.5, 3.0], [1.0, 3.5]), (0, "grey"): ([0.0], [0.5]),
        (1, "orange"): ([1.0], [2.0]), (0, "green"): ([2.0], [3.0])}
    assert used == {"forward", "backward", "comm", "waiting for host"}
