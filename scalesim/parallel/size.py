"""How many tasks a step will have, estimated before building it (scalesim/limits.py bounds it).

Per simulated rank: for each micro-batch, each layer the rank holds runs a
forward, a backward and at most one recompute, plus (tensor parallel) the
collectives around both block halves, (ZeRO-3) its gathers and scatters and
(context parallel) its key/value exchange; once per step, the gradient
buckets' reductions (and ZeRO-1/2 gathers). Within ~30% of the built programs
of the shipped scenarios and validation cases.
"""

from __future__ import annotations

from scalesim.models.spec import ModelSpec
from scalesim.parallel.parallel_plan import ParallelPlan


def step_counts(model: ModelSpec, plan: ParallelPlan, ranks: int) -> dict:
    """Keyword arguments of `scalesim.limits.check_step_size` for `ranks` simulated ranks."""
    pl = plan.placement
    layers_per_rank = -(-len(model.layers) // pl.pp)
    tasks_per_layer = 3 + (8 if pl.tp > 1 else 0) + (2 if plan.zero == 3 else 0) + (2 if pl.cp > 1 else 0)
    buckets = 0.0
    if plan.zero < 3:
        grad_bytes = model.params / (pl.tp * pl.pp) * 4        # fp32 gradients: the most buckets
        buckets = grad_bytes / plan.bucket_bytes + layers_per_rank
    return {"ranks": ranks, "micro_batches": plan.micro_batches, "layers_per_rank": layers_per_rank,
            "tasks_per_layer": tasks_per_layer, "buckets_per_rank": buckets}
