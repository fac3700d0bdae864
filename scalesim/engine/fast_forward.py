"""Fast-forward through a step's repeating periods, with the timeline the full simulation gives.

The step is played twice, shortened (engine/periods.py): with m periods cut out
of every rank's window, and with m - 1. If the periods repeat, the first play's
period after the cut is its period before the cut shifted by one period length,
Delta (checked before the second play), and the second is the first with one
period inserted at the cut: every task before the cut at the same
times, the inserted period at the times of the first one after the cut, and every
task after it exactly one period length (Delta) later. That is checked for every
interval (ready, start and end, within `TOLERANCE` of the step); it means that
one more period changes nothing but a shift by Delta, so the state the step is in
at the cut comes back period after period, and the whole step is the shortened
one with the m periods put back as copies shifted by 0, Delta, 2 Delta, ... and
what follows shifted by m Delta. Bytes and SM slowdowns grow by what one period
added. When the check fails (warm-up not over, contention that drifts), the
caller plays the whole step. `exact_simulation` turns the fast-forward off.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from itertools import repeat
from operator import attrgetter, itemgetter

import numpy as np

from scalesim.engine.periods import Cut, find_windows, may_repeat, plan_cut, shortened
from scalesim.program import Program, no_collection
from scalesim.timeline import Interval, Timeline

# Steps with fewer tasks are played whole: they take milliseconds anyway.
MIN_TASKS = 20_000
# How far (relative to the shortened step's length) an interval of the longer shortened step may
# lie from where one period's shift puts it: float rounding of times that differ by Delta.
TOLERANCE = 1e-11

# (intervals in the order they ended, each one's task index, bytes sent, bytes delivered, slowed per rank)
Played = tuple[list[Interval], list[int], float, float, dict[int, float]]

_STREAM, _NAME, _KIND = attrgetter("stream"), attrgetter("name"), attrgetter("kind")

_EXACT: contextvars.ContextVar[bool] = contextvars.ContextVar("scalesim_exact_simulation", default=False)


@contextlib.contextmanager
def exact_simulation(exact: bool = True) -> Iterator[None]:
    """Within the block, `simulate` plays every task of every step (`--exact`) when `exact`."""
    token = _EXACT.set(exact)
    try:
        yield
    finally:
        _EXACT.reset(token)


def exact_requested() -> bool:
    return _EXACT.get()


# Work started elsewhere (a forked process: app/forked.py) whose answer is asked for later:
# beside(work) returns an object with result() (work's value) and close() (not needed after all).
Beside = Callable[[Callable[[], object]], object]


def fast_forward(program: Program, play: Callable[[Program], Played], beside: Beside | None = None
                 ) -> Timeline | None:
    """The step's timeline from two shortened plays, or None when it has no repeating periods
    worth skipping or they do not repeat exactly (then the caller plays it whole). `beside`: the
    second play is started there before the first is played here (the same plays, at once)."""
    periods = _periodic_plays(program, play, beside)
    return None if periods is None else _spliced(program, *periods)


def fast_forward_end_s(program: Program, play: Callable[[Program], Played]) -> float | None:
    """`fast_forward(...).end_s` without making the step's intervals (a scaling-curve point needs
    only the step time): the same float, the largest of the same end times."""
    periods = _periodic_plays(program, play, None)
    if periods is None:
        return None
    cut, _a, _b, times, delta_s = periods
    ends = [times[rank][2][source] + shift
            for rank, tasks in program.tasks.items() if tasks
            for source, shift in (_sources(len(tasks), cut, rank, delta_s),)]
    return max((float(end.max()) for end in ends), default=0.0)


def _periodic_plays(program: Program, play: Callable[[Program], Played], beside: Beside | None = None
                    ) -> tuple | None:
    """(cut, short play, the one period longer play's bytes and slowdowns, the short play's times,
    period length) when the step's periods repeat exactly, else None."""
    total = sum(len(t) for t in program.tasks.values())
    seen: dict = {}
    if total < MIN_TASKS or not may_repeat(program, seen):
        return None
    windows = find_windows(program, seen)
    cut = plan_cut(windows, total) if windows else None
    if cut is None:
        return None
    short = shortened(program, cut, cut.removed)
    if short is None:
        return None
    longer = later = None
    if beside is not None:
        longer = shortened(program, cut, cut.removed - 1)
        later = beside(lambda: _times_played(play, longer)) if longer is not None else None
    try:
        a = _played(play, short)
        if a is None:
            return None
        times_a = _times(a, short)
        tolerance_s = TOLERANCE * max(_end(a[0]), 1e-300)
        delta_s = _across_cut(cut, times_a, tolerance_s)
        if delta_s is None:
            return None            # not periodic across the cut: spare the second play
        if later is None:
            longer = shortened(program, cut, cut.removed - 1)
            if longer is None:
                return None
        b = later.result() if later is not None else _times_played(play, longer)
    finally:
        if later is not None:
            later.close()
    if b is None or not _repeats(cut, times_a, b[0], delta_s, tolerance_s):
        return None
    return cut, a, b, times_a, delta_s


def _times_played(play: Callable[[Program], Played], short: Program) -> tuple | None:
    """`_played`, kept to what the splice needs of the longer play: its times (`_times`), bytes sent
    and delivered, and SM slowdowns (small to send back from another process)."""
    played = _played(play, short)
    return None if played is None else (_times(played, short), *played[2:])


def _played(play: Callable[[Program], Played], short: Program) -> Played | None:
    """The shortened step played, or None when it cannot be (a call or dependency left hanging
    that the checks of engine/periods.py did not see): the whole step is played instead."""
    try:
        return play(short)
    except RuntimeError:
        return None


def _across_cut(cut: Cut, times: dict[int, np.ndarray], tolerance_s: float) -> float | None:
    """The time every task of the period after the cut starts later than its equivalent in the
    period before it (the same for all: the period's length), or None when they differ."""
    shifts = np.concatenate([(t[:, cut.at(r):cut.at(r) + w.period] - t[:, cut.at(r) - w.period:cut.at(r)]).ravel()
                             for r, t in times.items() for w in (cut.windows[r],)])
    if len(shifts) == 0 or shifts.max() - shifts.min() > tolerance_s or shifts.min() < 0:
        return None
    return float(np.median(shifts))


def _end(intervals: list[Interval]) -> float:
    return max((iv.end_s for iv in intervals), default=0.0)


def _times(played: Played, program: Program) -> dict[int, np.ndarray]:
    """Per rank, a (3, tasks) array of each task's ready, start and end times."""
    out = {rank: np.empty((3, len(tasks))) for rank, tasks in program.tasks.items()}
    for iv, index in zip(played[0], played[1]):
        column = out[iv.rank][:, index]
        column[0], column[1], column[2] = iv.ready_s, iv.start_s, iv.end_s
    return out


def _repeats(cut: Cut, short: dict[int, np.ndarray], longer: dict[int, np.ndarray], delta_s: float,
             tolerance_s: float) -> bool:
    """The longer play is the short one with one period inserted at the cut (see the module)."""
    for rank, a in short.items():
        b = longer[rank]
        at, period = cut.at(rank), cut.windows[rank].period
        if b.shape[1] != a.shape[1] + period:
            return False
        if not np.allclose(b[:, :at + period], a[:, :at + period], rtol=0.0, atol=tolerance_s):
            return False
        if not np.allclose(b[:, at:], a[:, at - period:] + delta_s, rtol=0.0, atol=tolerance_s):
            return False
    return True


def _spliced(program: Program, cut: Cut, a: Played, b: tuple, times: dict[int, np.ndarray],
             delta_s: float) -> Timeline:
    """The whole step: the short play with the cut-out periods put back as shifted copies."""
    with no_collection():
        ordered = tuple(_intervals(program, cut, times, delta_s))
    m = cut.removed
    sent = a[2] + m * (b[1] - a[2])
    delivered = a[3] + m * (b[2] - a[3])
    slowed = {rank: a[4].get(rank, 0.0) + m * (b[3].get(rank, 0.0) - a[4].get(rank, 0.0))
              for rank in sorted(set(a[4]) | set(b[3]))}
    return Timeline(ordered, max((iv.end_s for iv in ordered), default=0.0), sent, delivered, slowed)


def _intervals(program: Program, cut: Cut, times: dict[int, np.ndarray], delta_s: float) -> list[Interval]:
    """Every task's interval: before the cut as played, the cut-out periods as copies of the first
    period after it shifted by 0, Delta, 2 Delta, ..., and what follows shifted by m Delta; in the
    timeline's order (rank, start, stream, end; ties in task order), sorted on the arrays."""
    intervals: list[Interval] = []
    for rank in sorted(program.tasks):
        tasks = program.tasks[rank]
        if not tasks:
            continue
        source, shift = _sources(len(tasks), cut, rank, delta_s)
        ready, start, end = (times[rank][k][source] + shift for k in range(3))
        streams = list(map(_STREAM, tasks))
        code = {name: i for i, name in enumerate(sorted(set(streams)))}     # in the streams' own order
        order = np.lexsort((end, np.fromiter(map(code.__getitem__, streams), np.int64, len(tasks)), start))
        pick = itemgetter(*order.tolist()) if len(tasks) > 1 else (lambda items: (items[0],))
        intervals.extend(map(Interval._make, zip(repeat(rank), pick(streams), pick(list(map(_NAME, tasks))),
                                                 pick(list(map(_KIND, tasks))), ready[order].tolist(),
                                                 start[order].tolist(), end[order].tolist())))
    return intervals


def _sources(count: int, cut: Cut, rank: int, delta_s: float) -> tuple[np.ndarray, np.ndarray]:
    """For each of the rank's `count` tasks in the whole step: the task of the short play it copies,
    and how much later it runs (0 before the cut, k Delta in the k-th period put back)."""
    m = cut.removed
    at, period = cut.at(rank), cut.windows[rank].period
    index = np.arange(count)
    copy = np.clip((index - at) // period, 0, m)         # periods the task lies after the cut's start
    source = np.where(index < at, index, np.where(copy < m, at + (index - at) % period, index - m * period))
    shift = np.where(index < at, 0.0, copy * delta_s)
    return source, shift
