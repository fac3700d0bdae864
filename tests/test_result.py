"""The interval arithmetic behind a step's breakdown (scalesim/result.py), against unit cells counted one by one."""

import random

import numpy as np

from scalesim.result import _spans_length, _spans_minus, _spans_union


def _cells(spans) -> set[int]:
    return {x for start, end in spans for x in range(int(start), int(end))}


def test_union_and_difference_cover_exactly_the_cells_they_should():
    rnd = random.Random(7)
    for _ in range(2000):
        a = [(float(s), float(s + rnd.randint(-2, 9))) for s in (rnd.randint(0, 60) for _ in range(rnd.randint(0, 12)))]
        b = [(float(s), float(s + rnd.randint(-2, 9))) for s in (rnd.randint(0, 60) for _ in range(rnd.randint(0, 12)))]
        ua, ub = (_spans_union(np.array([s for s, _ in x], float), np.array([e for _, e in x], float)) for x in (a, b))
        spans = lambda pair: list(zip(pair[0].tolist(), pair[1].tolist()))  # noqa: E731
        assert _cells(spans(ua)) == _cells(a) and _spans_length(ua) == len(_cells(a))
        assert all(s < e for s, e in spans(ua)) and all(e1 < s2 for (_, e1), (s2, _) in zip(spans(ua), spans(ua)[1:]))
        minus = _spans_minus(ua, ub)
        assert _cells(spans(minus)) == _cells(a) - _cells(b)
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(spans(minus), spans(minus)[1:]))  # apart: as many spans as runs


def test_every_ranks_breakdown_read_at_once_is_each_ranks_own():
    """`rank_breakdowns` reads the timeline into arrays once: each rank's breakdown is the very one of its
    own intervals, whatever order the ranks' intervals are interleaved in, and the critical rank is found."""
    from scalesim.result import breakdown, critical_rank, rank_breakdowns
    from scalesim.timeline import Interval, Timeline, columns

    rnd = random.Random(3)
    kinds = ("forward", "backward", "recompute", "optimizer", "other", "comm")
    for _ in range(200):
        intervals = []
        for _ in range(rnd.randint(1, 60)):
            ready = rnd.uniform(0, 10)
            start = ready + rnd.choice((0.0, rnd.uniform(0, 2)))
            intervals.append(Interval(rnd.choice((0, 1, 2, 5)), "s", "t", rnd.choice(kinds), ready, start,
                                      start + rnd.uniform(0, 3)))
        timeline = Timeline(tuple(intervals), max(iv.end_s for iv in intervals), 0.0, 0.0)
        parts, critical = rank_breakdowns(timeline)
        assert list(parts) == sorted({iv.rank for iv in intervals})
        assert parts == {r: breakdown(timeline.for_rank(r), timeline.end_s) for r in parts}
        assert critical == critical_rank(timeline)
        assert rank_breakdowns(timeline, columns(timeline)) == (parts, critical)     # the columns read once
        in_order = Timeline(tuple(sorted(intervals, key=lambda iv: iv.rank)), timeline.end_s, 0.0, 0.0)
        assert rank_breakdowns(in_order) == (parts, critical)                        # as the engine gives them
