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
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield self.env.timeout(phase.latency_s)
            if phase.flows:
                yield self.net.start([(f.links, f.size_bytes, f.rate_cap_bytes_per_s) for f in phase.flows])
        call.done.succeed()


def simulate(program: Program) -> Timeline:
    """Run one step; deterministic for a given program."""
    env = simpy.Environment()
    run = _Run(env, FluidNetwork(env, program.link_capacity_bytes_per_s), program)
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
