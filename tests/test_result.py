"""The interval arithmetic behind a step's breakdown (scalesim/result.py), against unit cells counted one by one."""

import random

from scalesim.result import _length, _minus, _union


def _cells(spans) -> set[int]:
    return {x for start, end in spans for x in range(int(start), int(end))}


def test_union_and_difference_cover_exactly_the_cells_they_should():
    rnd = random.Random(7)
    for _ in range(2000):
        a = [(float(s), float(s + rnd.randint(-2, 9))) for s in (rnd.randint(0, 60) for _ in range(rnd.randint(0, 12)))]
        b = [(float(s), float(s + rnd.randint(-2, 9))) for s in (rnd.randint(0, 60) for _ in range(rnd.randint(0, 12)))]
        ua, ub = _union(a), _union(b)
        assert _cells(ua) == _cells(a) and _length(ua) == len(_cells(a))
        assert all(s < e for s, e in ua) and all(e1 < s2 for (_, e1), (s2, _) in zip(ua, ua[1:]))  # sorted, apart
        assert _cells(_minus(ua, ub)) == _cells(a) - _cells(b)
