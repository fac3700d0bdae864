"""A lower bound on a plan's step time without simulating it, so a plan search skips the plans
that cannot beat the best one it has simulated.

The bound is what the engine can never beat: the compute tasks of one rank
run one after another on its compute stream, each at most at full speed
(communication kernels holding SMs and the host thread only delay them), so
the step lasts at least the sum of their durations. With a 1F1B pipeline,
stage s cannot start before micro-batch 0 has gone forward through stages
0..s-1, and after its last backward the last micro-batch's gradient still
goes back through stages s-1..0 before stage 0's optimizer step:

    step >= max over s of [ sum_{s'<s} (F_s' + B_s') + C_s ] + O_0

(F, B: one micro-batch's forward and backward-with-recompute on a stage; C_s:
all of stage s's compute before its optimizer step; O_0: stage 0's optimizer
step). Communication counts only where compute must wait for it: the blocking
tensor-parallel calls around each block half (Megatron without overlap), at
their time alone on their links. Other schedules use the plain sum per
rank. The durations are the builder's own (the same cost models), so the
bound is exact arithmetic on the simulated tasks, not an estimate.

Pruning with it is exact for the ranking: at one GPU count every plan has the
same batch, nodes and failure model, so time to train and cost both grow with
the step time, and a plan whose bound exceeds the best simulated step cannot
be best.
"""

from __future__ import annotations

from scalesim.collectives.estimate import plan_time_s
from scalesim.costs.optimizer import optimizer_time_s
from scalesim.parallel.builder import StepBuilder
from scalesim.parallel.parallel_plan import ParallelPlan

# A plan is skipped only when its bound exceeds the best step by more than this
# (summation order: the engine adds the same durations in another order).
MARGIN = 1e-6


def _stage_compute(builder: StepBuilder, stage: int) -> tuple[float, float, float]:
    """(one micro-batch's forward of the stage's first chunk, its backward with recompute, all the
    stage's compute before the optimizer step), in seconds at full speed."""
    plan: ParallelPlan = builder.plan
    pl = plan.placement
    recompute = plan.checkpointing in ("full", "selective", "selective-op")
    factor = plan.slowest_gpu_factor
    tp_forward, tp_backward = _tp_calls_s(builder, stage)
    first_forward = first_backward = per_micro_batch = 0.0
    tp_recompute = tp_forward if plan.checkpointing == "full" else 0.0
    for local in range(plan.chunks_per_stage):
        forward = backward = 0.0
        halves = recomputed_halves = 0
        for work in builder.chunk_work[local * pl.pp + stage]:
            for part in work.parts:
                forward += part.forward_s * factor
                recompute_s = part.recompute_s if recompute and work.recomputed else 0.0
                backward += (part.backward_s + recompute_s) * factor
            halves += len(work.parts) if work.is_block else 0
            recomputed_halves += len(work.parts) if work.is_block and work.recomputed else 0
        # Between two block halves' compute, their calls are on the compute stream's path; the
        # first call of a pass may overlap earlier work and its last nothing on the stream awaits.
        forward += max(halves - 1, 0) * tp_forward
        backward += max(halves - 1, 0) * tp_backward + max(recomputed_halves - 1, 0) * tp_recompute
        if local == 0:
            first_forward, first_backward = forward, backward
        per_micro_batch += forward + backward
    return first_forward, first_backward, per_micro_batch * plan.micro_batches


def _tp_calls_s(builder: StepBuilder, stage: int) -> tuple[float, float]:
    """The blocking tensor-parallel calls around one block half, forward and backward, each at
    its time alone on its links (contention only lengthens it): compute waits for them."""
    plan: ParallelPlan = builder.plan
    pl = plan.placement
    group = pl.group("tp", pl.coords(builder.simulated[stage]))
    if len(group) <= 1 or builder.activation_bytes <= 0:
        return 0.0, 0.0

    def alone_s(op: str) -> float:
        call = builder._with_copies(op, group, builder.activation_bytes, ("tp",))
        return plan_time_s(call, builder.topology.capacity_bytes_per_s, builder.memo)
    if plan.sequence_parallel:
        return alone_s("all_gather") + alone_s("reduce_scatter"), alone_s("all_reduce")
    return alone_s("all_reduce"), alone_s("all_reduce")


def _optimizer_s(builder: StepBuilder, stage: int) -> float:
    plan: ParallelPlan = builder.plan
    if plan.offload_optimizer:
        return 0.0                               # the update runs on the CPU's own stream
    pl = plan.placement
    params = sum(builder._trained(w.layer) for c in range(plan.chunks_per_stage)
                 for w in builder.chunk_work[c * pl.pp + stage])
    shards = len(pl.grad_group(pl.coords(builder.simulated[0]))) if plan.zero >= 1 else 1
    return optimizer_time_s(params / shards, builder.gpu, plan.precision, plan.optimizer) * plan.slowest_gpu_factor


def step_lower_bound_s(model, gpu, topology, plan: ParallelPlan, chunks=None, memo: dict | None = None) -> float:
    """A time the simulated step of this plan can never beat (module docstring)."""
    builder = StepBuilder(model, gpu, topology, plan, symmetric=True, chunks=chunks, memo=memo)
    pp = plan.placement.pp
    stages = [_stage_compute(builder, s) for s in range(pp)]
    optimizer = [_optimizer_s(builder, s) for s in range(pp)]
    plain = max(total + optimizer[s] for s, (_, _, total) in enumerate(stages))
    if pp == 1 or plan.chunks_per_stage > 1 or plan.schedule != "1f1b":
        return plain
    chained, upstream = 0.0, 0.0
    for forward, backward, total in stages:
        chained = max(chained, upstream + total)
        upstream += forward + backward
    return max(plain, chained + optimizer[0])


def beaten(bound_s: float, best_s: float | None) -> bool:
    """Whether a plan with this step-time bound cannot beat a simulated best step."""
    return best_s is not None and bound_s > best_s * (1 + MARGIN)


def compiled_bound_s(step) -> float:
    """`step_lower_bound_s` of a compiled step (parallel/step.py); 0 (never skip) if it cannot be formed."""
    try:
        return step_lower_bound_s(step.model, step.gpu, step.topology, step.plan, step.chunks, step.memo)
    except (ValueError, KeyError, ZeroDivisionError):
        return 0.0


# Plans are simulated in waves of this many, lowest bound first; the best step is updated between
# waves. A fixed size (not the worker count) keeps the pruned set the same on every executor.
WAVE = 4


def bound_waves(ordered: list) -> list[list]:
    """The points (ordered by bound) cut into waves."""
    return [ordered[i:i + WAVE] for i in range(0, len(ordered), WAVE)]


def best_steps(rows) -> dict[int, float]:
    """The shortest simulated step of a fitting plan per GPU count, from sweep rows."""
    best: dict[int, float] = {}
    for r in rows:
        if r["status"] == "ok" and r.get("step_time_s") is not None:
            best[r["gpus"]] = min(best.get(r["gpus"], r["step_time_s"]), r["step_time_s"])
    return best


def fastest(setups: list, simulate_s, limit: int) -> list[tuple[int, float]]:
    """(index, simulated step) of the `limit` fastest setups, fastest first (ties in list order),
    as simulating all of them would give; setups whose bound exceeds the `limit`-th fastest step
    found so far are never simulated (lowest bound first)."""
    bounds = [compiled_bound_s(s.step) for s in setups]
    timed: list[tuple[float, int]] = []
    for i in sorted(range(len(setups)), key=lambda i: (bounds[i], i)):
        kept = sorted(timed)[:limit]
        if len(kept) == limit and beaten(bounds[i], kept[-1][0]):
            continue
        timed.append((simulate_s(setups[i]), i))
    return [(i, step) for step, i in sorted(timed)[:limit]]
