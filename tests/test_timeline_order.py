"""The timeline's order from arrays (`in_timeline_order`) is the tuple-key sort's, ties included."""

from __future__ import annotations

import random
from operator import attrgetter

from scalesim.timeline import Interval, in_timeline_order


def test_array_order_is_the_stable_sort_by_rank_start_stream_end():
    rng = random.Random(7)
    streams = ["compute", "comm", "pp", "offload", "a2a"]
    for _ in range(50):
        # Few distinct values: most intervals tie on rank and start, many on stream and end too,
        # so the order of ties (the order they were recorded in) decides much of the result.
        intervals = [Interval(rng.randrange(3), rng.choice(streams), f"t{i}", "comm", 0.0,
                              rng.choice((0.0, 1.5, 2.25)), rng.choice((2.25, 3.0)))
                     for i in range(rng.randrange(0, 60))]
        expected = tuple(sorted(intervals, key=attrgetter("rank", "start_s", "stream", "end_s")))
        got = in_timeline_order(intervals)
        assert [iv.name for iv in got] == [iv.name for iv in expected]
