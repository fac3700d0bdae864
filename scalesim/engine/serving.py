"""Request-level serving simulation: arrivals, a router, and replicas running iterations.

Simulated time is in seconds. Each replica is a simpy process that asks its
scheduler (the batching policy, `scalesim.serving.scheduler`) for the next
batch, holds for the time the cost model gives that batch, and applies it;
with nothing to run it sleeps until a request arrives. Requests arrive
open-loop at their given times, or from `concurrency` closed-loop clients
that each send their next request when the last one finishes. The router
sends each request to a replica: in turn (round-robin) or to the one with the
fewest unfinished requests (least-loaded; ties to the lowest index).

The engine knows nothing of models or GPUs: time comes in as a function of
the batch. Ties in simpy's event queue break in insertion order, so a run is
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy

from scalesim.limits import check_time
from scalesim.serving.metrics import Record
from scalesim.serving.scheduler import Batch, Scheduler
from scalesim.serving.workload import Request

ROUTERS = ("round-robin", "least-loaded")


@dataclass(frozen=True, slots=True)
class ServingRun:
    records: tuple[Record, ...]
    busy_s: tuple[float, ...]          # per replica: time spent running iterations
    end_s: float
    iterations: int


class _Run:
    """The mutable state of one simulation (owned by `simulate_serving`, never shared)."""

    def __init__(self, env: simpy.Environment, schedulers: Sequence[Scheduler],
                 iteration_s: Callable[[Batch], float], router: str):
        if router not in ROUTERS:
            raise ValueError(f"router must be one of {ROUTERS}, not {router!r}")
        self.env = env
        self.schedulers = list(schedulers)
        self.iteration_s = iteration_s
        self.router = router
        self.turn = 0
        self.wake: list[simpy.Event | None] = [None] * len(self.schedulers)
        self.busy = [0.0] * len(self.schedulers)
        self.records: list[Record] = []
        self.iterations = 0
        self.pending: list[Request] = []        # closed loop: requests not sent yet

    def route(self) -> int:
        if self.router == "round-robin":
            k = self.turn % len(self.schedulers)
            self.turn += 1
            return k
        loads = [s.outstanding for s in self.schedulers]
        return loads.index(min(loads))

    def submit(self, request: Request) -> None:
        k = self.route()
        self.schedulers[k].add(request, self.env.now)
        if self.wake[k] is not None and not self.wake[k].triggered:
            self.wake[k].succeed()

    def replica(self, k: int):
        scheduler = self.schedulers[k]
        while True:
            batch = scheduler.schedule()
            if batch is None:
                self.wake[k] = self.env.event()
                yield self.wake[k]
                continue
            duration = self.iteration_s(batch)
            yield self.env.timeout(duration)
            self.busy[k] += duration
            self.iterations += 1
            if not self.iterations % 256:
                check_time()                # a caller's wall-clock limit (serve --max-seconds)
            for seq in scheduler.complete(batch, self.env.now):
                self.records.append(Record(seq.arrival_s, seq.first_token_s, seq.finish_s,
                                           seq.request.output_tokens, seq.preemptions))
                if self.pending:
                    self.submit(self.pending.pop())

    def open_loop(self, requests: Sequence[Request]):
        for request in sorted(requests, key=lambda r: (r.arrival_s, r.id)):
            if request.arrival_s > self.env.now:
                yield self.env.timeout(request.arrival_s - self.env.now)
            self.submit(request)


def simulate_serving(requests: Sequence[Request], schedulers: Sequence[Scheduler],
                     iteration_s: Callable[[Batch], float], *, router: str = "least-loaded",
                     concurrency: int | None = None) -> ServingRun:
    """Play the requests out on the replicas (one scheduler each); `concurrency` switches to a
    closed loop of that many clients (arrival times are then ignored)."""
    env = simpy.Environment()
    run = _Run(env, schedulers, iteration_s, router)
    for k in range(len(run.schedulers)):
        env.process(run.replica(k))
    if concurrency is None:
        env.process(run.open_loop(requests))
    else:
        run.pending = list(reversed(requests))       # pop() sends them in order
        for _ in range(min(concurrency, len(requests))):
            run.submit(run.pending.pop())
    env.run()
    return ServingRun(tuple(run.records), tuple(run.busy), env.now, run.iterations)
