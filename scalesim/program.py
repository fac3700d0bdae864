"""A training step as per-rank programs: the contract between `parallel` and `engine`.

Each rank (GPU) has a list of tasks. A task runs on one of the rank's streams
(like a CUDA stream: tasks on one stream run in program order) once the tasks
it depends on (by index in the same rank's list) have finished. A collective
task with the same `key` on every rank of its group starts when the last of
them is ready, and ends for all of them together.

Each rank also has a host thread that issues its tasks in program order (list
order), spending each task's `host_s` of CPU time: a task cannot start before
it is issued, and after a `host_sync` task the host waits for it to finish
before issuing the next (a `.item()`, or Megatron's synchronize after P2P).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from scalesim.collectives.plan import CollectivePlan

COMPUTE_STREAM = "compute"
COMM_STREAM = "comm"

# Tasks are records the builder makes by the hundred thousand per step and nothing changes after:
# slots dataclasses compared and hashed by value, but not frozen, because a frozen dataclass's
# __init__ sets each field through object.__setattr__ (5x slower to make: 2.5 us against 0.5 us).
_TASK = dict(slots=True, unsafe_hash=True)


@dataclass(**_TASK)
class ComputeTask:
    """Work on the GPU's SMs for a known duration (from the cost models)."""

    name: str
    kind: str                  # forward | backward | recompute | optimizer | other
    duration_s: float
    deps: tuple[int, ...] = ()
    stream: str = COMPUTE_STREAM
    flop: float = 0.0          # executed FLOP (including recompute), for utilisation
    # Row of Program.held_factors: how much longer the task takes while communication kernels
    # hold part of the SMs (its GEMMs' waves on the SMs left; costs/compute.py). -1: no row;
    # the task slows to the SMs left, 1 / (1 - share).
    held: int = -1
    host_s: float = 0.0        # CPU time the rank's host thread spends issuing the task's kernels
    host_sync: bool = False    # the host waits for the task to finish before issuing more (.item())


@dataclass(**_TASK)
class CollectiveTask:
    """One rank's part in a collective; `key` is shared by all ranks of the call.

    participants: how many simulated ranks take part (0: all of plan.ranks).
    When symmetric ranks are simulated once, only their representatives
    arrive, while the plan still carries every rank's flows.
    sm_share: the fraction of this rank's SMs the call's kernels hold while it
    runs (NCCL's CUDA blocks; 0 for copy-engine transfers). Compute on the
    rank's compute stream shares the SMs that are left.
    """

    name: str
    key: str
    plan: CollectivePlan
    deps: tuple[int, ...] = ()
    stream: str = COMM_STREAM
    kind: str = "comm"
    participants: int = 0
    sm_share: float = 0.0
    host_s: float = 0.0        # CPU time to issue the call (see ComputeTask)
    host_sync: bool = False    # the host waits for the call to finish (Megatron's P2P synchronize)


Task = ComputeTask | CollectiveTask


@dataclass(frozen=True, slots=True)
class Program:
    """Tasks of every simulated rank, plus the link capacities the flows use."""

    tasks: dict[int, tuple[Task, ...]]          # rank -> tasks in program order
    link_capacity_bytes_per_s: tuple[float, ...]
    link_names: tuple[str, ...] = field(default=())
    # Rows of (sm_share, factor) pairs, one per kind of compute task (ComputeTask.held): the
    # task takes `factor` times as long while calls hold that share of its rank's SMs.
    held_factors: tuple[tuple[tuple[float, float], ...], ...] = ()


class _Holders:
    """Who is holding the cyclic collector off. Its switch is one for the whole process, and a Dask
    cluster of threads (tests/app/test_sweep_executors.py) plays plans on several threads at once. When
    each block read `gc.isenabled()` on entry, one that read "off" (another block held it) and whose
    `gc.disable()` came after the other block had turned it on again as it left never turned it on
    itself: gc stayed off for the rest of the process (a flake of the pytest suite). So the first block
    in remembers whether it was on, and the last one out, whatever its thread, turns it back on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.count == 0:
                self.was_enabled = gc.isenabled()
            self.count += 1
            gc.disable()

    def leave(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0 and self.was_enabled:
                gc.enable()


_HOLDERS = _Holders()


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No cyclic garbage collection within the block (blocks nest, also across threads: the
    collector is on again once the last block open in any thread is left, if it was on before the
    first). Building a program and playing it make hundreds of thousands of tasks, events and
    intervals that stay alive to the end: the collections they trigger scan everything alive and
    find next to nothing (a few thousand objects per step; ~25% of the 1,024-GPU GPT-3 step's build
    and play). What is left is collected after."""
    _HOLDERS.enter()
    try:
        yield
    finally:
        _HOLDERS.leave()
