"""Runs of a stream's tasks played as one timer, with the times the task-by-task walk gives.

Between two points where a walk meets the rest of the step (a task another walk
waits for, a dependency on another walk not yet met, a call with other members,
a host sync not yet released), its tasks follow each other at times fixed by
their durations: compute at the rate the rank's SMs give it, blocking solo calls
in their closed-form time, host issue waits from the host thread's offsets.
`plan_stretch` computes those times up front with the same floating-point
operations the walk would do, so one timer at the end replaces an event (or
three) per task. The only thing that can change them meanwhile is a call on
another stream taking or giving back SMs of the rank: the simulator then breaks
the stretch (`current_entry`) and plays the task in progress and the rest one
by one, from exactly the state the walk would have had.

The same, with one caveat measured on 25,000 random programs (tests/engine/test_stretches.py):
when three or more calls take or give back SMs of a rank at the same instant, the order in
which the stretch's wake-up and the walk's events run can differ, and the SM share they add up
(a float sum) can differ in its last bit: about 1 program in 1,000 then has a compute slowdown,
and 1 in 25,000 an interval end, a few ulps (1e-15 relative) apart. Every shipped scenario's
timeline is identical either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappush

import simpy
from simpy.events import NORMAL

from scalesim.engine.events import succeed
from scalesim.program import COMPUTE_STREAM, ComputeTask
from scalesim.timeline import Interval

# However many calls overlap, compute keeps at least this share of the SMs
# (NCCL's blocks are a few dozen of a GPU's 80-144 SMs; the floor only guards
# against pathological sums).
MIN_COMPUTE_RATE = 0.25

# Tasks planned at once: a call taking SMs of the rank breaks a stretch and the rest of
# its plan is dropped, so long plans waste work where calls overlap compute often.
MAX_ENTRIES = 8

# Entry kinds: compute on the rank's SMs, other compute (or none), a solo call timed by formula.
SMS, PLAIN, CALL = 0, 1, 2


def compute_rate(comm_share: float, factors: tuple = ()) -> float:
    """Speed of a compute task, relative to alone, while calls hold `comm_share` of the SMs:
    from the task's own factor for that share when it has one, else the SMs left."""
    if comm_share <= 0:
        return 1.0
    for share, factor in factors:
        if abs(share - comm_share) < 1e-9:
            return 1.0 / factor
    return 1.0 - comm_share


def held(comm_share: float, share: float) -> float:
    """The SM share calls hold after one takes (+share) or gives back (-share) its part."""
    comm_share += share
    return 0.0 if comm_share < 1e-12 else comm_share   # all calls ended: no floating-point residue


@dataclass(slots=True)
class Entry:
    """One task of a stretch: when it was ready, issued and over, and the SM share around it."""

    position: int          # in the walk
    index: int             # in the rank's task list
    kind: int              # SMS, PLAIN or CALL
    ready_s: float
    issued_s: float
    end_s: float
    before: float          # the share calls held when it became ready
    share: float           # ... while it ran (a solo call's own included)
    rate: float = 1.0      # SMS: its compute rate at that share


@dataclass(slots=True)
class Stretch:
    rank: int
    entries: list[Entry]
    done: object                   # the event the walk waits for
    generation: int = 0            # timers of older generations are stale
    current: int = -1              # the entry the walk wakes up in
    issuing: bool = False          # ... still waiting for its host to issue it


def plan_stretch(run, rank: int, indices: list[int], position: int, events: list, host, share: float,
                 sms_bound: bool) -> Stretch | None:
    """The tasks from `position` on that can be played as one stretch starting now (None when
    fewer than two): what the walk would do, operation for operation, while nothing else
    touches the rank's SMs. `sms_bound`: compute-stream tasks run on the rank's SMs."""
    tasks = run.program.tasks[rank]
    isolated = run.isolated
    factors = run.program.held_factors
    crossing = run.crossing[rank]
    t = run.env._now
    entries = []
    for pos in range(position, min(len(indices), position + MAX_ENTRIES)):
        index = indices[pos]
        task = tasks[index]
        if pos > position and crossing[index] and any(events[d].callbacks is not None for d in crossing[index]):
            break
        computes = task.__class__ is ComputeTask
        if not computes and not (task.participants == 1 and id(task.plan) in isolated):
            break
        ready = t
        if host is not None:
            segment = host.segment[index]
            base_s = 0.0
            if segment >= 0:
                if events[segment].callbacks is not None:
                    break
                base_s = host.released_s[segment]
            wait_s = base_s + host.offset_s[index] - t
            if wait_s > 0:
                t = t + wait_s
            if not computes:
                ready = t
        issued, before, rate = t, share, 1.0
        if not computes:
            kind = CALL
            if task.sm_share > 0:
                share = held(share, task.sm_share)
            t = t + isolated[id(task.plan)]
        elif sms_bound and task.stream == COMPUTE_STREAM and task.duration_s > 0:
            kind = SMS
            if share > 0:
                rate = max(compute_rate(share, factors[task.held] if task.held >= 0 else ()), MIN_COMPUTE_RATE)
                t = t + task.duration_s / rate
            else:                                       # compute_rate 1: d / 1.0 is d
                t = t + task.duration_s
        else:
            kind = PLAIN
            if task.duration_s > 0:
                t = t + task.duration_s
        entries.append(Entry(pos, index, kind, ready, issued, t, before, share, rate))
        if kind == CALL and task.sm_share > 0:
            share = held(share, -task.sm_share)
        if events[index] is not None:
            break
    if len(entries) < 2:
        return None
    return Stretch(rank, entries, run.env.event())


def stretch_starts(tasks: tuple, indices: list[int], events: list, isolated: dict) -> list[bool]:
    """Per position of a walk, whether a stretch can start there at all: `plan_stretch` plans two
    or more tasks only from a task it can plan (compute, or a solo call timed by formula) that no
    other walk waits for, followed by another it can plan. Elsewhere the walk need not try."""
    plannable = [task.__class__ is ComputeTask or (task.participants == 1 and id(task.plan) in isolated)
                 for task in map(tasks.__getitem__, indices)]
    return [plannable[k] and plannable[k + 1] and events[indices[k]] is None for k in range(len(indices) - 1)
            ] + [False] * min(len(indices), 1)


def current_entry(stretch: Stretch, now_s: float) -> int:
    """The entry in progress at `now_s`: the first not over yet (the last one at the very end)."""
    entries = stretch.entries
    for k, entry in enumerate(entries):
        if entry.end_s > now_s:
            return k
    return len(entries) - 1


def timer_at(env: simpy.Environment, at_s: float) -> simpy.Event:
    """An event that fires at `at_s` exactly, as a timeout the walk had set then would.

    `env.timeout(delay)` fires at now + delay, rounded, and some times later than now are
    not now + any delay; so the event goes on simpy's queue at its time directly (the
    queue entry a timeout makes: time, normal priority, the next event id)."""
    event = _new_event(simpy.Event)               # simpy.Event(env), without its __init__
    event.env, event.callbacks = env, []
    event._ok, event._value = True, None          # triggered, as a Timeout is when made
    heappush(env._queue, (at_s, NORMAL, next(env._eid), event))
    return event


_new_event = simpy.Event.__new__


class StretchWalks:
    """The simulator's side of stretches (mixed into its run state, `simulator._Run`): start one,
    wake the walk where it must, break it when a call takes or gives back the rank's SMs."""

    def start_stretch(self, rank: int, indices: list[int], position: int, events: list, host) -> Stretch | None:
        """Start playing the tasks from `position` on as one stretch, when two or more can be."""
        sms = self.sms.get(rank)
        if sms is not None and sms.comm_share > 0:
            return None      # a call holds SMs: its end would break the stretch soon (task by task is cheaper)
        stretch = plan_stretch(self, rank, indices, position, events, host, 0.0, sms is not None)
        if stretch is None:
            return None
        if sms is not None:
            sms.stretch = stretch
        self.wake_at(stretch, stretch.entries[-1].end_s, ending=True)
        return stretch

    def wake_at(self, stretch: Stretch, at_s: float, ending: bool = False) -> None:
        """The walk waiting for `stretch` wakes at `at_s` (exactly), unless the stretch is broken first."""
        stretch.generation += 1
        generation = stretch.generation
        timer = timer_at(self.env, at_s)
        timer.callbacks.append(lambda _event: self._stretch_timer(stretch, generation, ending))

    def _stretch_timer(self, stretch: Stretch, generation: int, ending: bool) -> None:
        if generation != stretch.generation:
            return          # broken since: a newer timer (or the SMs' own) wakes the walk
        if ending:
            self.settle(stretch, len(stretch.entries) - 1)
        succeed(stretch.done)

    def settle(self, stretch: Stretch, current: int) -> None:
        """Record the entries before `current` and put the rank in the state the walk would be
        in during entry `current`: its SM share, a solo call's bytes counted."""
        entries = stretch.entries
        rank = stretch.rank
        self.commit(rank, entries[:current])
        entry = entries[current]
        task = self.program.tasks[rank][entry.index]
        stretch.current = current
        stretch.issuing = self.env._now < entry.issued_s
        sms = self.sms.get(rank)
        if sms is not None:
            sms.stretch = None
            sms.comm_share = entry.before if stretch.issuing else entry.share
            if entry.kind == SMS and not stretch.issuing:
                sms.contended = entry.share > 0
        if entry.kind == CALL and not stretch.issuing:
            self.alone_s(task.plan)

    def commit(self, rank: int, entries: list[Entry]) -> None:
        """Record entries that are over (their times as planned), as the walk would have."""
        tasks = self.program.tasks[rank]
        record = self.intervals.append
        self.indices.extend(entry.index for entry in entries)
        for entry in entries:
            task = tasks[entry.index]
            if entry.kind == CALL:
                self.alone_s(task.plan)
            elif entry.kind == SMS and entry.share > 0:
                extra_s = max(entry.end_s - entry.issued_s - task.duration_s, 0.0)
                self.slowed[rank] = self.slowed.get(rank, 0.0) + extra_s
            record(Interval(rank, task.stream, task.name, task.kind, entry.ready_s, entry.issued_s, entry.end_s))

    def break_stretch(self, sms) -> None:
        """A call takes or gives back SMs of a rank in mid-stretch: from now on its walk goes task by
        task, starting in the state it would be in now (the caller then re-times the compute)."""
        stretch = sms.stretch
        now = self.env._now
        current = current_entry(stretch, now)
        stretch.generation += 1                  # the stretch's own timer is stale
        self.settle(stretch, current)
        entry = stretch.entries[current]
        if stretch.issuing:
            self.wake_at(stretch, entry.issued_s)
        elif entry.kind == SMS:
            task = self.program.tasks[stretch.rank][entry.index]
            sms.remaining_s, sms.since_s, sms.rate = task.duration_s, entry.issued_s, entry.rate
            sms.factors = self.program.held_factors[task.held] if task.held >= 0 else ()
            sms.done = stretch.done
        else:
            self.wake_at(stretch, entry.end_s)

    def end_stretch(self, rank: int, stretch: Stretch, events: list) -> tuple:
        """The walk woke in entry `stretch.current`: finish it, or hand it back when it is yet to be
        issued. Returns (the walk's next position, the entry to play from its issue or None)."""
        entry = stretch.entries[stretch.current]
        if stretch.issuing:
            return entry.position, entry
        task = self.program.tasks[rank][entry.index]
        if entry.kind == SMS:
            sms = self.sms[rank]
            if sms.contended:
                extra_s = max(self.env._now - entry.issued_s - task.duration_s, 0.0)
                self.slowed[rank] = self.slowed.get(rank, 0.0) + extra_s
        elif entry.kind == CALL and task.sm_share > 0:
            self.hold(((rank, task.sm_share),), -1)
        self.finished(rank, entry.index, events, entry.ready_s, entry.issued_s)
        return entry.position + 1, None

