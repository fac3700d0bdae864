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
