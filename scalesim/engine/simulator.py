"""Play a step's per-rank programs out in simulated time.

Every (rank, stream) pair is one simpy process that walks its tasks in
program order, waiting for each task's dependencies. Collectives rendezvous:
the call starts when every rank of its group has reached it, its phases run
one after another on the shared fluid network (played by the walk that arrived
last, the others waiting for its end), and it ends for all ranks at once.
Nothing here knows what a layer or an optimizer is.

While a collective runs, its kernels hold part of each member's SMs
(`CollectiveTask.sm_share`); compute on that rank's compute stream progresses
at the rate the remaining SMs give (the task's own row of
`Program.held_factors` where the builder gave one: its GEMMs' waves on fewer
SMs), re-timed whenever a call starts or ends.

With `closed_form` (the default) a phase that finds its links free is timed by
formula until another flow touches them (engine/reservations.py, call_phases.py),
and blocking solo calls are walked inside the compute walk: the fluid network's
times to float rounding (1e-15 relative), with fewer events per task.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy
from simpy.events import Timeout

from scalesim.collectives.plan import CollectivePlan
from scalesim.engine.call_phases import CallPhases
from scalesim.engine.closed_form import (call_families, inline_blocking_calls, inline_call_chains, isolated_plans,
                                        private_splits)
from scalesim.engine.events import all_of, awaited_events, run as run_events, succeed, timeout
from scalesim.engine.fast_forward import Beside, Played, exact_requested, fast_forward, fast_forward_end_s
from scalesim.engine.host_thread import HostThread, host_thread
from scalesim.engine.network import FluidNetwork
from scalesim.engine.stretches import (MIN_COMPUTE_RATE, Stretch, StretchWalks, compute_rate, held,
                                      stretch_starts)
from scalesim.timeline import Interval, Timeline, in_timeline_order
from scalesim.limits import check_time
from scalesim.program import COMPUTE_STREAM, CollectiveTask, ComputeTask, Program, no_collection

_new_tuple = tuple.__new__

__all__ = ["MIN_COMPUTE_RATE", "compute_rate", "played", "simulate", "step_time_s"]


@dataclass
class _Call:
    """A collective call in progress: who has arrived, when it began, when it ends."""

    waiting: int
    done: simpy.Event
    start_s: float | None = None
    holders: list = field(default_factory=list)    # (rank, sm_share) of the arrived ranks


@dataclass(slots=True)
class _Sms:
    """One rank's SMs: the share communication kernels hold, and the compute task running on the rest."""

    comm_share: float = 0.0
    remaining_s: float = 0.0        # of the running task, at full speed
    rate: float = 1.0
    since_s: float = 0.0
    done: simpy.Event | None = None     # the running task's timer (the walk waits for it)
    contended: bool = False         # the running task has shared its SMs at some point
    factors: tuple = ()             # the running task's row of Program.held_factors
    stretch: Stretch | None = None  # the compute walk's stretch in flight (engine/stretches.py)


@dataclass
class _Run(StretchWalks, CallPhases):
    env: simpy.Environment
    net: FluidNetwork
    program: Program
    calls: dict[str, _Call] = field(default_factory=dict)        # key -> a call some members have not reached
    intervals: list[Interval] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)            # per interval, its task's index on its rank
    isolated: dict[int, float] = field(default_factory=dict)   # id(plan) -> time alone
    private: dict[int, list] = field(default_factory=dict)     # id(plan) -> per phase (exposed, s, bytes)
    sms: dict[int, _Sms] = field(default_factory=dict)          # rank -> its SMs, when any call holds some
    slowed: dict[int, float] = field(default_factory=dict)      # rank -> compute time added by held SMs
    sent: dict[int, float] = field(default_factory=dict)        # id(plan) -> its bytes, summed once
    hosts: dict[int, HostThread] = field(default_factory=dict)       # rank -> its host thread, where it costs
    flow_triples: dict[int, tuple] = field(default_factory=dict)     # id(flow tuple) -> (it, network triples)
    # rank -> per task, what it waits for on other walks (its deps there, and its stream's order)
    crossing: dict[int, list] = field(default_factory=dict)
    reserve: bool = False     # phases whose links are free run by formula (engine/reservations.py)

    def stream(self, rank: int, indices: list[int], events: list, stretches: bool = False):
        """Walk one stream's tasks in order. events[i]: fires when task i ends, for the
        tasks another stream waits for (None for the rest: order alone covers them).
        `stretches`: play runs of tasks nothing else waits for as one timer (engine/stretches.py)."""
        env = self.env
        tasks = self.program.tasks[rank]
        host = self.hosts.get(rank)
        crossing = self.crossing[rank]
        position, count = 0, len(indices)
        starts = stretch_starts(tasks, indices, events, self.isolated) if stretches else None
        while position < count:
            check_time()                     # a caller's wall-clock limit (scalesim/limits.py)
            index = indices[position]
            task = tasks[index]
            deps = crossing[index]
            if deps:
                wait = self.dependency(deps, events)
                if wait is not None:
                    yield wait
            if stretches and starts[position]:
                stretch = self.start_stretch(rank, indices, position, events, host)
                if stretch is not None:
                    yield stretch.done
                    position, entry = self.end_stretch(rank, stretch, events)
                    if entry is not None:      # woken where its host issues the task: play it from there
                        yield from self.task(rank, entry.index, events, entry.ready_s, entry.issued_s)
                        position = entry.position + 1
                    continue
            ready_s = env._now
            if host is not None:
                segment = host.segment[index]
                if segment >= 0 and events[segment].callbacks is not None:
                    yield from self.issued(host, index, events)     # its sync task is not over yet
                else:                         # what `issued` does then, without a generator
                    wait_s = (host.released_s[segment] if segment >= 0 else 0.0) + host.offset_s[index] - env._now
                    if wait_s > 0:
                        yield timeout(env, wait_s)
                if task.__class__ is not ComputeTask:
                    ready_s = env._now        # a rank reaches a call when its host has issued it
            yield from self.task(rank, index, events, ready_s, env._now)
            position += 1

    def task(self, rank: int, index: int, events: list, ready_s: float, issued_s: float):
        """Play one issued task to its end, record it and tell the walks that wait for it."""
        env = self.env
        task = self.program.tasks[rank][index]
        if task.__class__ is ComputeTask:
            duration_s = task.duration_s
            if duration_s > 0:
                sms = self.sms.get(rank) if task.stream == COMPUTE_STREAM else None
                if sms is None:
                    yield timeout(env, duration_s)
                else:
                    held_factors = self.program.held_factors
                    yield self.compute(sms, duration_s, held_factors[task.held] if task.held >= 0 else ())
                    if sms.contended:
                        extra_s = max(env._now - issued_s - duration_s, 0.0)
                        self.slowed[rank] = self.slowed.get(rank, 0.0) + extra_s
            start_s = issued_s
        elif task.participants == 1:
            # The only simulated member of its call: no rendezvous to wait for, so the call is
            # played right here (a call that runs alone on its links takes its closed-form time).
            holders = ((rank, task.sm_share),) if task.sm_share > 0 else ()
            if holders:
                self.hold(holders, +1)
            plan = task.plan
            phases = plan.phases
            if id(plan) in self.isolated:
                yield timeout(env, self.alone_s(plan))
            elif self.reserve and len(phases) == 1 and phases[0].flows and (
                    ends := self._reserved_phase(phases[0], self.private.get(id(plan), (None,))[0])) is not None:
                for end in ends:
                    yield end
            elif len(phases) == 1 and id(plan) not in self.private:
                phase = phases[0]               # what _phases does for it, without a generator of its own
                if phase.latency_s > 0:
                    yield timeout(env, phase.latency_s)
                if phase.flows:
                    yield self.net.start(self.triples(phase.flows))
            else:
                yield from self._phases(plan)
            if holders:
                self.hold(holders, -1)
            start_s = issued_s
        else:
            call = self.arrive(task, rank)
            if call.waiting == 0:            # the last to arrive plays the call; the others wait for it
                yield from self.play(task.plan, call)
            else:
                yield call.done
            start_s = call.start_s
        self.finished(rank, index, events, ready_s, start_s)

    def finished(self, rank: int, index: int, events: list, ready_s: float, start_s: float) -> None:
        task = self.program.tasks[rank][index]
        # Interval(...) without its generated __new__ (a Python frame per task): the same tuple.
        self.intervals.append(_new_tuple(Interval, (rank, task.stream, task.name, task.kind, ready_s, start_s,
                                                    self.env._now)))
        self.indices.append(index)
        if task.host_sync:
            self.hosts[rank].released_s[index] = self.env._now
        done = events[index]
        if done is not None:
            succeed(done)

    def dependency(self, deps: tuple[int, ...], events: list):
        """The event a task waits for before it starts (None when its dependencies are done)."""
        if len(deps) == 1:               # the common case, without building a list
            e = events[deps[0]]
            return e if e is not None and e.callbacks is not None else None
        pending = []
        for d in deps:
            e = events[d]
            if e is not None and e.callbacks is not None:
                pending.append(e)
        if len(pending) == 1:
            return pending[0]
        return all_of(self.env, pending) if pending else None

    def issued(self, host: HostThread, index: int, events: list):
        """Wait until the host thread has issued task `index` (after its segment's sync task)."""
        segment = host.segment[index]
        base_s = 0.0
        if segment >= 0:
            release = events[segment]
            if release.callbacks is not None:
                yield release
            base_s = host.released_s[segment]
        wait_s = base_s + host.offset_s[index] - self.env._now
        if wait_s > 0:
            yield timeout(self.env, wait_s)

    def compute(self, sms: _Sms, duration_s: float, factors: tuple = ()) -> simpy.Event:
        """Run a compute task on the SMs the rank's communication leaves free."""
        sms.remaining_s = duration_s
        sms.since_s = self.env._now
        sms.done = None
        sms.contended = False
        sms.factors = factors
        self._retime(sms)
        return sms.done

    def _retime(self, sms: _Sms) -> None:
        """Time the running task's end from its rate now: a new timer, which whoever waited for the
        old one (or for a broken stretch, engine/stretches.py) now waits for; the old one fires idle."""
        sms.rate = max(compute_rate(sms.comm_share, sms.factors), MIN_COMPUTE_RATE)
        sms.contended = sms.contended or sms.comm_share > 0
        timer = timeout(self.env, sms.remaining_s / sms.rate)
        old = sms.done
        if old.__class__ is Timeout:
            timer.callbacks, old.callbacks = old.callbacks, []
        else:
            timer.callbacks.append(lambda event: self._finish(sms, event))   # first: before the walk goes on
            if old is not None:
                timer.callbacks.extend(old.callbacks)
                old.callbacks = []
        sms.done = timer

    @staticmethod
    def _finish(sms: _Sms, timer: Timeout) -> None:
        if sms.done is timer:
            sms.done, sms.remaining_s = None, 0.0

    def hold(self, holders: list, sign: int) -> None:
        """A call starts (+1) or ends (-1): its kernels take or give back SMs on its ranks."""
        now = self.env._now
        for rank, share in holders:
            if share <= 0:
                continue
            sms = self.sms[rank]
            if sms.stretch is not None:
                self.break_stretch(sms)
            if sms.done is not None:
                sms.remaining_s = max(sms.remaining_s - (now - sms.since_s) * sms.rate, 0.0)
                sms.since_s = now
            sms.comm_share = held(sms.comm_share, sign * share)
            if sms.done is not None:
                self._retime(sms)

    def arrive(self, task: CollectiveTask, rank: int) -> _Call:
        call = self.calls.get(task.key)
        if call is None:
            call = _Call(waiting=task.participants or len(task.plan.ranks), done=self.env.event())
            self.calls[task.key] = call
        call.waiting -= 1
        if call.waiting == 0:
            del self.calls[task.key]      # all arrived: only calls still waiting for members stay
        if task.sm_share > 0:
            call.holders.append((rank, task.sm_share))
        return call

    def play(self, plan: CollectivePlan, call: _Call):
        call.start_s = self.env._now
        self.hold(call.holders, +1)
        yield from self._phases(plan)
        self.hold(call.holders, -1)
        succeed(call.done)

def simulate(program: Program, closed_form: bool = True, stretches: bool = True, exact: bool | None = None,
             beside: Beside | None = None) -> Timeline:
    """Run one step; deterministic for a given program.

    closed_form: time calls that run alone on their links, and groups of flows
    that run alone on theirs, by formula (`isolated_plans`, `private_splits`);
    False plays every flow through the fluid network.
    stretches: play runs of a walk's tasks that nothing else waits for as one timer
    (engine/stretches.py: the same times); False plays every task as its own events.
    exact: play every task (no fast-forward of repeating periods, engine/fast_forward.py);
    None: as `exact_simulation` says (by default the fast-forward is on).
    beside: where the fast-forward may play its second shortened step while it plays the first
    (engine/fast_forward.py; a forked process); the same timeline.
    """
    with no_collection():
        return _simulated(program, closed_form, stretches, exact, beside)


def _simulated(program: Program, closed_form: bool, stretches: bool, exact: bool | None,
               beside: Beside | None = None) -> Timeline:
    if not (exact_requested() if exact is None else exact):
        timeline = fast_forward(program, lambda short: played(short, closed_form, stretches), beside)
        if timeline is not None:
            return timeline
    intervals, _indices, sent, delivered, slowed = played(program, closed_form, stretches)
    end_s = max((iv.end_s for iv in intervals), default=0.0)
    ordered = in_timeline_order(intervals)
    return Timeline(ordered, end_s, sent, delivered, dict(sorted(slowed.items())))


def step_time_s(program: Program, closed_form: bool = True, stretches: bool = True, exact: bool | None = None
                ) -> float:
    """`simulate(program, ...).end_s`, the same float, without making or sorting the timeline's
    intervals where it can (the scaling curve's points need only the step time)."""
    play = lambda short: played(short, closed_form, stretches)  # noqa: E731
    with no_collection():
        if not (exact_requested() if exact is None else exact):
            end_s = fast_forward_end_s(program, play)
            if end_s is not None:
                return end_s
        return max((iv.end_s for iv in play(program)[0]), default=0.0)


def played(program: Program, closed_form: bool = True, stretches: bool = True) -> Played:
    """Play the step out: its intervals in the order they ended, each one's task index on its rank,
    bytes sent and delivered, and per rank the compute time added by held SMs."""
    env = simpy.Environment()
    run = _Run(env, FluidNetwork(env, program.link_capacity_bytes_per_s), program)
    every_plan: dict = {}
    if closed_form:
        run.reserve = True
        families = call_families(program)
        run.isolated = isolated_plans(program, families)
        run.private = private_splits(program, run.isolated, families)
        # Where phases may be reserved, any solo call can be walked inside the compute walk (the
        # inlining checks that a task is a solo call: the plans need not be told apart).
        every_plan = dict.fromkeys(families[0])
    for rank, tasks in program.tasks.items():
        if any(isinstance(t, CollectiveTask) and t.sm_share > 0 for t in tasks):
            run.sms[rank] = _Sms()
    for rank in sorted(program.tasks):
        tasks = program.tasks[rank]
        streams: dict[str, list[int]] = {}
        for index, task in enumerate(tasks):
            streams.setdefault(task.stream, []).append(index)
        # Blocking solo calls walk inside the compute walk: timed by formula (isolated), or, where
        # phases may run by formula until touched (reservations), any solo call.
        inlined = run.isolated if not run.reserve else every_plan
        if stretches:
            walks, order_deps = inline_call_chains(tasks, streams, inlined)
        else:
            walks, order_deps = inline_blocking_calls(tasks, streams, inlined), {}
        host = host_thread(tasks)
        if host is not None:
            run.hosts[rank] = host
        events, run.crossing[rank] = awaited_events(env, tasks, walks, order_deps, host is not None)
        for name in sorted(walks):
            env.process(run.stream(rank, walks[name], events, stretches and (name == COMPUTE_STREAM
                                                                            or rank not in run.sms)))
    run_events(env)
    unfinished = list(run.calls)      # calls some member never reached (`arrive` drops the complete ones)
    if unfinished:
        raise RuntimeError(f"collectives never completed (ranks missing): {unfinished[:3]}")
    expected = sum(len(t) for t in program.tasks.values())
    if len(run.intervals) != expected:
        raise RuntimeError("deadlock: some tasks never ran (check dependencies and call order)")
    return run.intervals, run.indices, run.net.bytes_sent, run.net.bytes_delivered, run.slowed

