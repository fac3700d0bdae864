"""Repeating periods of a step's programs, and the same step with some periods cut out.

A pipeline's steady 1F1B micro-batches, gradient-accumulation micro-steps and
identical layers give each rank's task list a stretch where the same block of
tasks comes again and again: same kinds, durations, streams, collective plans
and host costs, and the same dependencies relative to the task (only names and
call keys differ). `find_windows` finds, per rank, the block length (period)
and the stretch (window) where it repeats, from the tasks alone.

`shortened` cuts `m` periods out of every rank's window at the same copy (`Cut`):
the step as the builder would give it with m fewer repeats. Tasks after the cut
move back by m periods and take the dependencies their equivalents m periods
earlier have; a call that crossed the cut (a stage's send before it, the next
stage's receive inside it) pairs with the equivalent task after the cut. Where a
dependency or a call would join tasks in a way the period does not account for,
there is no shortened step (None) and the caller plays the whole one.
Pure functions of the program; engine/fast_forward.py plays and checks them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from operator import attrgetter

import numpy as np

from scalesim.program import CollectiveTask, ComputeTask, Program

# Periods kept on each side of a cut (at least; more before it for pipelines of more than 16
# ranks): the pattern around the cut must already be the steady one.
KEEP_BEFORE = 8
KEEP_AFTER = 3
# The step is played twice shortened (and its warm-up and cool-down cost more per task than the
# periods): skip at least this fraction of its tasks, or play it whole.
MIN_SKIPPED = 0.75
# Candidate periods tried per rank (the most frequent gaps between equal tasks).
CANDIDATES = 12
# Tasks from an anchor that a period found there must repeat (anchored_periods), and how many
# of the shortest such periods are tried.
ANCHOR_TASKS = 2048
ANCHORED = 4
# Tasks after the anchor compared for every candidate distance at once, before each remaining
# distance is compared over all ANCHOR_TASKS.
_PRESIFTED = 32


@dataclass(frozen=True, slots=True)
class Window:
    """tasks[start + k * period + j] are the same task for k < copies (0 <= j < period)."""

    start: int
    period: int
    copies: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.copies


@dataclass(frozen=True, slots=True)
class Cut:
    """Where each rank's window is cut (before copy `before` of its window) and how many periods go."""

    windows: dict[int, Window]
    before: int
    removed: int

    def at(self, rank: int) -> int:
        """The first index cut out on this rank."""
        w = self.windows[rank]
        return w.start + self.before * w.period

    def span(self, rank: int) -> int:
        """How many of the rank's tasks are cut out."""
        return self.removed * self.windows[rank].period


_COMPUTE_FIELDS = attrgetter("kind", "stream", "duration_s", "flop", "held", "host_s", "host_sync")
_CALL_FIELDS = attrgetter("kind", "stream", "participants", "sm_share", "host_s", "host_sync")


def signatures(program: Program) -> dict[int, np.ndarray]:
    """Per rank, a number per task: equal numbers for tasks that behave the same one period apart
    (all but name and call key, with dependencies relative to the task; plans by identity)."""
    return _signatures(program.tasks)


def _signatures(tasks_by_rank: dict) -> dict[int, np.ndarray]:
    known: dict[tuple, int] = {}
    number = known.setdefault
    out = {}
    for rank, tasks in tasks_by_rank.items():
        codes = []
        code = codes.append
        for i, t in enumerate(tasks):
            deps = t.deps       # relative: one dependency as a number (the common case), more as a tuple
            relative = (i - deps[0] if len(deps) == 1 else tuple([i - d for d in deps]) if deps else None)
            code(number((_COMPUTE_FIELDS(t), relative) if t.__class__ is ComputeTask
                        else (id(t.plan), _CALL_FIELDS(t), relative), len(known)))
        out[rank] = np.array(codes, np.int64)
    return out


def longest_repeat(sig: np.ndarray, period: int) -> Window:
    """The longest stretch of `sig` that repeats with this period."""
    if period <= 0 or period >= len(sig):
        return Window(0, max(period, 1), 1)
    same = np.concatenate(([False], sig[:-period] == sig[period:], [False]))
    edges = np.flatnonzero(np.diff(same.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]
    if len(starts) == 0:
        return Window(0, period, 1)
    best = int(np.argmax(ends - starts))
    first, last = int(starts[best]), int(ends[best])       # sig[i] == sig[i + period] for first <= i < last
    return Window(first, period, (last - first + period) // period)


def candidate_periods(sig: np.ndarray) -> list[int]:
    """The most frequent distances between a task and the next one like it."""
    order = np.argsort(sig, kind="stable")
    ordered = sig[order]
    gaps = np.diff(order)[ordered[1:] == ordered[:-1]]
    if len(gaps) == 0:
        return []
    values, counts = np.unique(gaps, return_counts=True)
    top = np.argsort(-counts, kind="stable")[:CANDIDATES]
    return [int(values[k]) for k in top]


def anchored_periods(sig: np.ndarray) -> list[int]:
    """The shortest distances d for which the tasks from a quarter and from half-way into the rank's
    list come again d later, for ANCHOR_TASKS tasks: the period of a pattern that repeats only over
    long rounds (interleaved 1F1B's micro-batch groups) is rarely a gap between equal tasks."""
    n = len(sig)
    out: set[int] = set()
    for anchor in (n // 4, n // 2):
        span = min(ANCHOR_TASKS, n // 8)
        if span < 1:
            continue
        reach = n - anchor - span          # the largest d with every compared task in the list
        distances = np.flatnonzero(sig[anchor + 1:anchor + 1 + max(reach, 0)] == sig[anchor]) + 1
        for t in range(1, min(span, _PRESIFTED)):       # a few tasks rule out most distances at once
            if len(distances) == 0:
                break
            distances = distances[sig[anchor + t + distances] == sig[anchor + t]]
        block, found = sig[anchor:anchor + span], 0
        for d in distances.tolist():                    # the rest compared whole, shortest first
            if found == ANCHORED:
                break
            if np.array_equal(sig[anchor + d:anchor + d + span], block):
                out.add(d)
                found += 1
    return sorted(out)


def _best_window(sig: np.ndarray, periods: list[int]) -> Window | None:
    """Of these periods, the one whose longest repeat covers the most tasks beyond its first copy."""
    best = None
    for period in periods:
        window = longest_repeat(sig, period)
        if best is None or (window.copies - 1) * period > (best.copies - 1) * best.period:
            best = window
    return best


def may_repeat(program: Program, seen: dict | None = None) -> bool:
    """Whether the rank with the most tasks repeats a block over enough of them for a cut to skip
    MIN_SKIPPED of its tasks: a cheap look (one rank's signatures) before `find_windows`.
    `seen`: where to keep that rank's signatures and window for `find_windows`."""
    rank = max(program.tasks, key=lambda r: len(program.tasks[r]))
    tasks = program.tasks[rank]
    sig = _signatures({rank: tasks})[rank]
    window = _best_window(sig, candidate_periods(sig) + anchored_periods(sig))
    if seen is not None:
        seen[rank] = (sig, window)
    skippable = (window.copies - KEEP_BEFORE - KEEP_AFTER) * window.period if window is not None else 0
    return skippable >= MIN_SKIPPED * len(tasks)


def find_windows(program: Program, seen: dict | None = None) -> dict[int, Window] | None:
    """Per rank, the period whose repeats would let the most tasks be skipped, taken as many times
    as it takes for all ranks' periods to cover the same work (`_multiples`); None if a rank has none.
    `seen`: ranks' (signatures, window) already found (`may_repeat`); windows depend only on which of
    a rank's tasks are alike, not on the numbers that say so."""
    seen = seen or {}
    signature = _signatures({r: t for r, t in program.tasks.items() if r not in seen})
    best: dict[int, Window] = {}
    for rank in program.tasks:
        if rank in seen:
            signature[rank], window = seen[rank]
        else:
            sig = signature[rank]
            window = _best_window(sig, candidate_periods(sig) + anchored_periods(sig))
        if window is None:
            return None
        best[rank] = window
    multiples = _multiples(program, best)
    if multiples is None:
        return None
    return {rank: w if multiples[rank] == 1 else longest_repeat(signature[rank], w.period * multiples[rank])
            for rank, w in best.items()}


def _multiples(program: Program, windows: dict[int, Window]) -> dict[int, int] | None:
    """How many of its periods each rank needs for all to cover the same work: as many calls with
    each simulated peer as the peer's periods have with it (a first stage's period may be two
    micro-batches where the next stage's is one; an interleaved schedule's, a whole round)."""
    calls: dict[int, dict[int, int]] = {}
    for rank, w in windows.items():
        with_peer = calls[rank] = {}
        for t in program.tasks[rank][w.start:w.start + w.period]:
            if t.__class__ is CollectiveTask:
                for peer in t.plan.ranks:
                    if peer != rank and peer in windows:
                        with_peer[peer] = with_peer.get(peer, 0) + 1
    scale: dict[int, Fraction] = {}
    for root in windows:
        if root in scale:
            continue
        scale[root] = Fraction(1)
        todo = [root]
        while todo:
            rank = todo.pop()
            for peer, count in calls[rank].items():
                back = calls[peer].get(rank, 0)
                if back == 0:
                    return None
                wanted = scale[rank] * count / back
                if peer not in scale:
                    scale[peer] = wanted
                    todo.append(peer)
                elif scale[peer] != wanted:
                    return None
    denominator = math.lcm(*(f.denominator for f in scale.values()))
    numbers = {rank: int(f * denominator) for rank, f in scale.items()}
    common = math.gcd(*numbers.values())
    return {rank: n // common for rank, n in numbers.items()}


def plan_cut(windows: dict[int, Window], total_tasks: int) -> Cut | None:
    """Cut the same number of periods from every rank's window, keeping some on each side;
    None when that would skip less than MIN_SKIPPED of the tasks."""
    # A pipeline settles into its period over about as many periods as it has stages (ranks here).
    before = max(KEEP_BEFORE, (len(windows) + 1) // 2)
    removed = min(w.copies for w in windows.values()) - before - KEEP_AFTER
    if removed < 2:
        return None
    if removed * sum(w.period for w in windows.values()) < MIN_SKIPPED * total_tasks:
        return None
    return Cut(windows, before, removed)


def shortened(program: Program, cut: Cut, removed: int) -> Program | None:
    """The program with `removed` periods cut out of every window at `cut` (None when some dependency
    or call would not survive the cut as the period says)."""
    cut = replace(cut, removed=removed)
    early, late = _kept_calls(program, cut)
    tasks = {}
    for rank, own in program.tasks.items():
        at, span = cut.at(rank), cut.span(rank)
        moved = []
        for i in range(at + span, len(own)):
            task = _moved(program, cut, rank, i, early, late)
            if task is None:
                return None
            moved.append(task)
        tasks[rank] = own[:at] + tuple(moved)
    short = Program(tasks, program.link_capacity_bytes_per_s, program.link_names, program.held_factors)
    return short if _calls_complete(short) else None


def _kept_calls(program: Program, cut: Cut) -> tuple[set[str], dict[str, int]]:
    """Keys of the calls before the cut, and how many members each call after it has there."""
    early: set[str] = set()
    late: dict[str, int] = {}
    for rank, tasks in program.tasks.items():
        at = cut.at(rank)
        early.update(t.key for t in tasks[:at] if t.__class__ is CollectiveTask)
        for t in tasks[at + cut.span(rank):]:
            if t.__class__ is CollectiveTask:
                late[t.key] = late.get(t.key, 0) + 1
    return early, late


def _members(task: CollectiveTask) -> int:
    return task.participants or len(task.plan.ranks)


def _moved(program: Program, cut: Cut, rank: int, i: int, early: set[str], late: dict[str, int]):
    """Task `i` (after the cut) as the shortened program has it, or None when it cannot move.

    Its dependencies and call in the window are those of its equivalent `span` earlier: a call
    with members cut out joins the call of that equivalent (whose other members are before
    the cut, or are moved likewise); `_calls_complete` then checks every call is whole."""
    task = program.tasks[rank][i]
    window, at, span = cut.windows[rank], cut.at(rank), cut.span(rank)
    periodic = i < window.end
    deps = []
    for d in task.deps:
        if d >= at + span or periodic:
            deps.append(d - span)          # in the window: what the task `span` earlier depends on
        elif d < window.start:
            deps.append(d)                 # before the window: the same task
        else:
            return None
    deps = tuple(deps)
    if task.__class__ is ComputeTask:
        return task if deps == task.deps else ComputeTask(
            task.name, task.kind, task.duration_s, deps, task.stream, task.flop, task.held, task.host_s,
            task.host_sync)
    key = task.key
    if key in early:
        return None                        # a call joining tasks on both sides of the cut, over the period
    if late[key] < _members(task):         # some members were cut out
        earlier = program.tasks[rank][i - span]
        if not periodic or earlier.__class__ is not CollectiveTask:
            return None
        key = earlier.key
    if deps == task.deps and key == task.key:
        return task
    return CollectiveTask(task.name, key, task.plan, deps, task.stream, task.kind, task.participants,
                          task.sm_share, task.host_s, task.host_sync)


def _calls_complete(program: Program) -> bool:
    """Every call of the shortened program has all its members, on different ranks."""
    seen: dict[str, list[int]] = {}
    first: dict[str, CollectiveTask] = {}
    for rank, tasks in program.tasks.items():
        for t in tasks:
            if t.__class__ is CollectiveTask:
                seen.setdefault(t.key, []).append(rank)
                first.setdefault(t.key, t)
    return all(len(ranks) == len(set(ranks)) == _members(first[key]) for key, ranks in seen.items())
