"""What a simulated step means: step time and where it goes, throughput, MFU, cost.

Pure functions of the engine's timeline and the cost models' numbers; the
JSON contract of `scalesim run --json` is `StepResult.to_json()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from scalesim.timeline import Columns, Interval, Timeline, columns

COMPUTE_KINDS = ("forward", "backward", "recompute")
OTHER_KINDS = ("optimizer", "other")
_KIND, _READY, _START, _END = (attrgetter(name) for name in ("kind", "ready_s", "start_s", "end_s"))


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one rank's step time goes; the four parts sum to the step time.

    compute: forward/backward/recompute kernels running; other: optimizer
    and other non-model work; exposed_comm: communication running while no
    compute runs; bubble: the rank is idle (pipeline bubble, waiting for peers).
    """

    compute: float
    exposed_comm: float
    bubble: float
    other: float
    total_comm: float
    compute_slowed_by_comm: float = 0.0    # part of `compute`: SMs held by overlapped NCCL kernels
    host_bound: float = 0.0                # part of `other`: GPU idle until the host issued its work

    def as_dict(self) -> dict[str, float]:
        """The four parts that sum to the step time."""
        return {"compute": self.compute, "exposed_comm": self.exposed_comm,
                "bubble": self.bubble, "other": self.other}

    def to_json(self) -> dict[str, float]:
        """The four parts, and `host_bound`, which is inside `other`."""
        return {**self.as_dict(), "host_bound": self.host_bound}


Spans = tuple[np.ndarray, np.ndarray]      # sorted, disjoint, not touching: (starts, ends)


def _spans_union(start: np.ndarray, end: np.ndarray) -> Spans:
    """The union of the spans (start[i], end[i]) (empty ones dropped) as sorted spans that do not touch."""
    full = end > start
    start, end = start[full], end[full]
    if not len(start):
        return start, end
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > np.maximum.accumulate(end)[:-1]
    first = np.flatnonzero(new)
    return start[first], np.maximum.reduceat(end, first)


def _spans_minus(a: Spans, b: Spans) -> Spans:
    """The stretches of `a` that no span of `b` covers, bounded by their endpoints (the same floats). Between consecutive endpoints of either, a stretch is in `a` and
    not in `b` or not; runs of those that are make the spans."""
    if not len(a[0]) or not len(b[0]):
        return a
    points = np.unique(np.concatenate((*a, *b)))
    left = points[:-1]

    def inside(spans: Spans) -> np.ndarray:
        at = np.searchsorted(spans[0], left, side="right") - 1
        return (at >= 0) & (spans[1][np.maximum(at, 0)] > left)

    keep = np.diff(np.concatenate(([0], (inside(a) & ~inside(b)).astype(np.int8), [0])))
    return points[np.flatnonzero(keep == 1)], points[np.flatnonzero(keep == -1)]


def _spans_length(spans: Spans) -> float:
    return sum((spans[1] - spans[0]).tolist())      # Python's sum, span after span


_CLASS = {**dict.fromkeys(COMPUTE_KINDS, 0), **dict.fromkeys(OTHER_KINDS, 1)}    # else 2: communication


def breakdown(intervals: list[Interval], step_time_s: float) -> Breakdown:
    """Where one rank's step went (`Breakdown`), from its intervals, as unions of spans on arrays."""
    n = len(intervals)
    kinds = list(map(_KIND, intervals))
    classes = {kind: _CLASS.get(kind, 2) for kind in dict.fromkeys(kinds)}
    cls = np.fromiter(map(classes.__getitem__, kinds), np.int8, n)
    start = np.fromiter(map(_START, intervals), np.float64, n)
    end = np.fromiter(map(_END, intervals), np.float64, n)
    ready = np.fromiter(map(_READY, intervals), np.float64, n)
    return _breakdown(cls, start, end, ready, step_time_s)


def _breakdown(cls: np.ndarray, start: np.ndarray, end: np.ndarray, ready: np.ndarray,
               step_time_s: float) -> Breakdown:
    """`breakdown` of one rank's intervals as arrays: class (0 compute, 1 other, 2 communication), times."""
    compute = _spans_union(start[cls == 0], end[cls == 0])
    other = _spans_minus(_spans_union(start[cls == 1], end[cls == 1]), compute)
    busy = _spans_union(np.concatenate((compute[0], other[0])), np.concatenate((compute[1], other[1])))
    comm = _spans_union(start[cls == 2], end[cls == 2])
    exposed = _spans_length(_spans_minus(comm, busy))
    # GPU work whose inputs were ready but whose kernels the host had not issued yet, while
    # nothing else ran: the step is host-bound there (counted in `other`).
    late = (start > ready) & (cls < 2)
    waits = _spans_union(ready[late], start[late])
    host = _spans_length(_spans_minus(_spans_minus(waits, busy), comm)) if len(waits[0]) else 0.0
    c, o = _spans_length(compute), _spans_length(other) + host
    bubble = max(step_time_s - c - o - exposed, 0.0)
    return Breakdown(c, exposed, bubble, o, _spans_length(comm), host_bound=host)


def rank_breakdowns(timeline: Timeline, cols: Columns | None = None) -> tuple[dict[int, Breakdown], int]:
    """Every simulated rank's `breakdown` of the step, by rank, and the `critical_rank`: the timeline
    read into arrays once (`cols`, its `columns` when the caller has them) and cut by rank (a stable
    sort, skipped when the ranks come in order as the engine gives them, keeps each rank's intervals
    in timeline order, so each rank's arrays, and its breakdown, are the very floats of `breakdown`
    of its intervals)."""
    cols = columns(timeline) if cols is None else cols
    rank, start, end, ready = cols.rank, cols.start_s, cols.end_s, cols.ready_s
    cls = np.array([_CLASS.get(kind, 2) for kind in cols.kinds], np.int8)[cols.kind]
    n = len(rank)
    if n and (np.diff(rank) < 0).any():
        order = np.argsort(rank, kind="stable")
        rank, cls, start, end, ready = rank[order], cls[order], start[order], end[order], ready[order]
    cuts = [0, *(np.flatnonzero(np.diff(rank)) + 1).tolist(), n]
    parts: dict[int, Breakdown] = {}
    ends: dict[int, float] = {}
    for lo, hi in zip(cuts, cuts[1:]):
        r = int(rank[lo])
        parts[r] = _breakdown(cls[lo:hi], start[lo:hi], end[lo:hi], ready[lo:hi], timeline.end_s)
        ends[r] = max(0.0, float(end[lo:hi].max()))
    latest = max(ends.values())
    return parts, min(r for r, e in ends.items() if e == latest)


def critical_rank(timeline: Timeline) -> int:
    """The lowest-numbered rank that finishes last: its time is the step time."""
    ends: dict[int, float] = {}
    for iv in timeline.intervals:
        ends[iv.rank] = max(ends.get(iv.rank, 0.0), iv.end_s)
    latest = max(ends.values())
    return min(r for r, e in ends.items() if e == latest)


@dataclass(frozen=True, slots=True)
class StepResult:
    scenario: str
    gpus: int
    gpu_name: str
    fits: bool
    reason: str | None
    memory_per_gpu_bytes: float
    memory_capacity_bytes: float
    memory_breakdown: dict[str, float]
    step_time_s: float
    breakdown: Breakdown
    samples_per_s: float
    tokens_per_s: float | None
    tflops_per_gpu: float
    mfu: float
    scaling_efficiency: float | None
    time_to_train_s: float | None
    cost_usd: float | None
    energy_kwh: float | None
    plan: dict[str, Any] = field(default_factory=dict)
    scaling: list[dict[str, float]] = field(default_factory=list)
    # Scaling points the command's answer budget left out: {"gpus", "reason", "estimated_tasks"}.
    scaling_skipped: list[dict[str, Any]] = field(default_factory=list)
    timeline: Timeline | None = field(default=None, repr=False)   # not part of the JSON
    economics: dict[str, Any] = field(default_factory=dict)       # cloud, on-prem, energy detail
    reliability: dict[str, Any] = field(default_factory=dict)     # failures, checkpoints, goodput
    assumptions: list[dict[str, Any]] = field(default_factory=list)  # every cost input and its source
    inputs: Any = field(default=None, repr=False, compare=False)   # costs.economics.RunInputs; not JSON
    slowest_gpu_factor: float = 1.0   # GPU work vs the median GPU: the job's slowest GPU sets the pace
    fit_confidence: str = "fits"      # fits | tight | does_not_fit (costs/memory.py, fit_confidence)
    # What PyTorch's caching allocator holds at the peak (torch.cuda.max_memory_reserved), most loaded stage.
    memory_reserved_bytes: float | None = None
    # The critical rank's host CPU time per step by cause and its blocking syncs, with the plan's
    # cuda_graphs and fsdp_version (app/host_causes.py): what a report needs to say what would cut
    # `breakdown.host_bound`. Empty when not known.
    host: dict[str, Any] = field(default_factory=dict)
    # The 1-GPU run `scaling_efficiency` compares with: whether it would fit the GPU's (and host's)
    # memory, and its GPU memory need. None where there is no efficiency (app/run.py _reference).
    scaling_reference_fits: bool | None = None
    scaling_reference_memory_bytes: float | None = None

    @property
    def memory_headroom_fraction(self) -> float:
        """Free share of the GPU's memory at the peak (negative when it does not fit)."""
        return 1.0 - self.memory_per_gpu_bytes / self.memory_capacity_bytes

    def to_json(self) -> dict[str, Any]:
        skipped = {"scaling_skipped": self.scaling_skipped} if self.scaling_skipped else {}
        return {
            "scenario": self.scenario,
            "gpus": self.gpus,
            "gpu": self.gpu_name,
            "fits": self.fits,
            "reason": self.reason,
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "memory_reserved_bytes": self.memory_reserved_bytes,
            "memory_headroom_fraction": self.memory_headroom_fraction,
            "fit_confidence": self.fit_confidence,
            "memory_breakdown_bytes": self.memory_breakdown,
            "step_time_s": self.step_time_s,
            "breakdown_s": self.breakdown.to_json(),
            "total_comm_s": self.breakdown.total_comm,
            "compute_slowed_by_comm_s": self.breakdown.compute_slowed_by_comm,
            "slowest_gpu_factor": self.slowest_gpu_factor,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "scaling_efficiency": self.scaling_efficiency,
            "scaling_reference_fits": self.scaling_reference_fits,
            "scaling_reference_memory_bytes": self.scaling_reference_memory_bytes,
            "time_to_train_s": self.time_to_train_s,
            "cost_usd": self.cost_usd,
            "energy_kwh": self.energy_kwh,
            "plan": self.plan,
            "scaling": self.scaling,
            "economics": self.economics,
            "reliability": self.reliability,
            "assumptions": self.assumptions,
            "host": self.host,
            **skipped,
        }


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (both minimised).

    >>> pareto_front([(1, 5), (2, 2), (3, 3), (4, 1)])
    [0, 1, 3]
    """
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any((ox <= x and oy <= y) and (ox < x or oy < y) for j, (ox, oy) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return front
