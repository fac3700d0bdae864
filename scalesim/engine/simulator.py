"""Play a step's per-rank programs out in simulated time.

Every (rank, stream) pair is one simpy process that walks its tasks in
program order, waiting for each task's dependencies. Collectives rendezvous:
the call starts when every rank of its group has reached it, its phases run
one after another on the shared fluid network, and it ends for all ranks at
once. Nothing here knows what a layer or an optimizer is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from scalesim.collectives.estimate import plan_time_s
from scalesim.collectives.plan import CollectivePlan
from scalesim.engine.network import FluidNetwork
from scalesim.engine.timeline import Interval, Timeline
from scalesim.program import CollectiveTask, ComputeTask, Program


@dataclass
class _Call:
    """A collective call in progress: who has arrived, when it began, when it ends."""

    waiting: int
    done: simpy.Event
    start_s: float | None = None


@dataclass
class _Run:
    env: simpy.Environment
    net: FluidNetwork
    program: Program
    done: dict[tuple[int, int], simpy.Event] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    intervals: list[Interval] = field(default_factory=list)
    isolated: dict[int, float] = field(default_factory=dict)   # id(plan) -> time alone

    def task_done(self, rank: int, index: int) -> simpy.Event:
        key = (rank, index)
        if key not in self.done:
            self.done[key] = self.env.event()
        return self.done[key]

    def stream(self, rank: int, indices: list[int]):
        tasks = self.program.tasks[rank]
        for index in indices:
            task = tasks[index]
            if task.deps:
                pending = [self.task_done(rank, d) for d in task.deps]
                pending = [e for e in pending if not e.processed]
                if pending:
                    yield self.env.all_of(pending)
            ready_s = self.env.now
            if isinstance(task, ComputeTask):
                if task.duration_s > 0:
                    yield self.env.timeout(task.duration_s)
                start_s = ready_s
            else:
                call = self.arrive(task)
                yield call.done
                start_s = call.start_s
            self.intervals.append(Interval(rank, task.stream, task.name, task.kind,
                                           ready_s, start_s, self.env.now))
            self.task_done(rank, index).succeed()

    def arrive(self, task: CollectiveTask) -> _Call:
        call = self.calls.get(task.key)
        if call is None:
            call = _Call(waiting=task.participants or len(task.plan.ranks), done=self.env.event())
            self.calls[task.key] = call
        call.waiting -= 1
        if call.waiting == 0:
            self.env.process(self.play(task.plan, call))
        return call

    def play(self, plan: CollectivePlan, call: _Call):
        call.start_s = self.env.now
        alone = self.isolated.get(id(plan))
        if alone is not None:
            # No other call can touch these links while this one runs: its time is the closed form.
            yield self.env.timeout(alone)
            self.net.bytes_sent += plan.bytes_sent
            self.net.bytes_delivered += plan.bytes_sent
            call.done.succeed()
            return
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield self.env.timeout(phase.latency_s)
            if phase.flows:
                yield self.net.start([(f.links, f.size_bytes, f.rate_cap_bytes_per_s) for f in phase.flows])
        call.done.succeed()


def isolated_plans(program: Program) -> dict[int, float]:
    """Plans that can never share a link with another call, and their closed-form times.

    Calls of one family (the same ranks on the same stream) run one after
    another on every rank, so they never overlap each other. If no other family
    uses any of a family's links, each of its calls runs alone on them, and the
    fluid model's answer is the closed form `plan_time_s` -- no need to play it
    out against the rest of the network. (Typically: tensor-parallel
    all-reduces on a node's NVSwitch ports.)
    """
    owners: dict[int, set] = {}
    plans: dict[int, CollectivePlan] = {}
    family_of: dict[int, tuple] = {}
    for tasks in program.tasks.values():
        for task in tasks:
            if not isinstance(task, CollectiveTask) or id(task.plan) in family_of:
                continue
            family = (task.plan.ranks, task.stream)
            family_of[id(task.plan)] = family
            plans[id(task.plan)] = task.plan
            for phase in task.plan.phases:
                for flow in phase.flows:
                    for link in flow.links:
                        owners.setdefault(link, set()).add(family)
    out = {}
    for key, plan in plans.items():
        links = {link for phase in plan.phases for flow in phase.flows for link in flow.links}
        if all(len(owners[link]) == 1 for link in links):
            out[key] = plan_time_s(plan, program.link_capacity_bytes_per_s)
    return out


def simulate(program: Program, closed_form: bool = True) -> Timeline:
    """Run one step; deterministic for a given program.

    closed_form: time calls that run alone on their links by formula
    (`isolated_plans`); False plays every call through the fluid network.
    """
    env = simpy.Environment()
    run = _Run(env, FluidNetwork(env, program.link_capacity_bytes_per_s), program)
    if closed_form:
        run.isolated = isolated_plans(program)
    for rank in sorted(program.tasks):
        streams: dict[str, list[int]] = {}
        for index, task in enumerate(program.tasks[rank]):
            streams.setdefault(task.stream, []).append(index)
        for name in sorted(streams):
            env.process(run.stream(rank, streams[name]))
    env.run()
    unfinished = [key for key, call in run.calls.items() if call.waiting > 0]
    if unfinished:
        raise RuntimeError(f"collectives never completed (ranks missing): {unfinished[:3]}")
    expected = sum(len(t) for t in program.tasks.values())
    if len(run.intervals) != expected:
        raise RuntimeError("deadlock: some tasks never ran (check dependencies and call order)")
    end_s = max((iv.end_s for iv in run.intervals), default=0.0)
    ordered = tuple(sorted(run.intervals, key=lambda iv: (iv.rank, iv.start_s, iv.stream, iv.end_s)))
    return Timeline(ordered, end_s, run.net.bytes_sent, run.net.bytes_delivered)
