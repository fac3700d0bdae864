"""What the engine saw: one interval per task and rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import NamedTuple

import numpy as np


class Interval(NamedTuple):
    """A task's run on one rank. For collectives, ready_s is when this rank
    reached the call; start_s is when the whole group had (the call began).

    A named tuple (immutable, compared field by field) rather than a frozen dataclass: the engine
    makes one per task, hundreds of thousands per step, and a tuple is several times cheaper to make."""

    rank: int
    stream: str
    name: str
    kind: str
    ready_s: float
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class Timeline:
    intervals: tuple[Interval, ...]
    end_s: float                       # when the last task of any rank finished
    bytes_sent: float                  # total bytes injected into the network
    bytes_delivered: float             # total bytes that arrived
    # rank -> seconds its compute took beyond the cost model's, because
    # overlapped communication kernels held some of its SMs
    compute_slowdown_s: dict[int, float] = field(default_factory=dict)

    def for_rank(self, rank: int) -> list[Interval]:
        return [iv for iv in self.intervals if iv.rank == rank]



_RANK, _STREAM, _KIND = attrgetter("rank"), attrgetter("stream"), attrgetter("kind")
_READY, _START, _END = attrgetter("ready_s"), attrgetter("start_s"), attrgetter("end_s")
# The same fields by position (an Interval is a tuple): cheaper than by name.
_RANK_AT, _STREAM_AT, _START_AT, _END_AT = itemgetter(0), itemgetter(1), itemgetter(5), itemgetter(6)


def in_timeline_order(intervals: list[Interval]) -> tuple[Interval, ...]:
    """`intervals` sorted by (rank, start, stream, end), ties kept in their order: what
    `sorted(intervals, key=attrgetter("rank", "start_s", "stream", "end_s"))` gives, sorted on
    arrays (a stable lexsort, streams coded in their own order): several times cheaper on a step's
    tens of thousands of intervals, whose many equal starts made the tuple keys compare streams."""
    n = len(intervals)
    if n < 2:
        return tuple(intervals)
    streams = list(map(_STREAM_AT, intervals))
    code = {name: i for i, name in enumerate(sorted(set(streams)))}
    order = np.lexsort((np.fromiter(map(_END_AT, intervals), np.float64, n),
                        np.fromiter(map(code.__getitem__, streams), np.int64, n),
                        np.fromiter(map(_START_AT, intervals), np.float64, n),
                        np.fromiter(map(_RANK_AT, intervals), np.int64, n)))
    return tuple(map(intervals.__getitem__, order.tolist()))


@dataclass(frozen=True)
class Columns:
    """The step's intervals as arrays, in the timeline's order; streams and kinds as codes into
    `streams` and `kinds` (the names in order of first appearance). Read once per step: the
    breakdowns (result.py) and the timeline plot (report/timeline_rows.py) both read these."""

    rank: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    ready_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    streams: list[str]
    kinds: list[str]


def columns(timeline: Timeline) -> Columns:
    intervals = timeline.intervals
    n = len(intervals)

    def coded(names: list[str]) -> tuple[np.ndarray, list[str]]:
        known = list(dict.fromkeys(names))                # the names in order of first appearance
        code = {name: i for i, name in enumerate(known)}
        return np.fromiter(map(code.__getitem__, names), np.int64, n), known

    stream, streams = coded(list(map(_STREAM, intervals)))
    kind, kinds = coded(list(map(_KIND, intervals)))
    floats = (np.fromiter(map(get, intervals), np.float64, n) for get in (_READY, _START, _END))
    return Columns(np.fromiter(map(_RANK, intervals), np.int64, n), stream, kind, *floats, streams, kinds)
