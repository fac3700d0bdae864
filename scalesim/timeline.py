"""What the engine saw: one interval per task and rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


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

