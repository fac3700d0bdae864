"""Expert parallelism: which GPU holds which experts, and what the busiest one does.

Megatron-Core lays expert-parallel ranks out of the data-parallel ones
(megatron/core/parallel_state.py, initialize_model_parallel with
expert_model_parallel_size; its expert RankGenerator orders tp-ep-dp-pp): the
tp x cp x dp ranks of a pipeline stage run attention as usual, while for the
MoE MLP the cp x dp positions are re-cut into ep x edp, with the expert
tensor-parallel size equal to tp (its default). Expert-parallel peers are
consecutive positions (inside a node first with the default order);
expert-data-parallel peers (edp = dp x cp / ep) hold the same experts and reduce
their gradients (and shard them under ZeRO: Megatron's distributed optimizer
keeps a separate expert-data-parallel buffer) over that group.

Each of the `ep` ranks holds experts/ep experts and receives, on average, as
many routed token copies as it sends (top_k per token). Routing is uneven:
`imbalance` is the busiest expert's tokens over the mean. The busiest rank holds
that expert plus experts/ep - 1 others, which share the shortfall the busiest
one's excess leaves (`rank_load_factor`): with one expert per rank it computes
and receives `imbalance` times the mean, with all experts on one rank exactly
the mean; every other rank
waits for it at the combine, so that rank sets the pace (as the slowest GPU
does in `costs/variability.py`). A capacity factor caps any expert at that
multiple of the mean (tokens beyond it are dropped, GShard / Switch style).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.moe import MOE_EXPERTS
from scalesim.models.spec import LayerSpec, MoESpec
from scalesim.parallel.placement import Placement

# Default busiest-expert / mean load, from Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing
# Strategy for Mixture-of-Experts" (arXiv:2408.15664), Table 2, MaxVio_global (max load / mean - 1)
# of 1B-parameter MoE models: 0.72 with an auxiliary balance loss, 0.04 with the loss-free
# (3B models: 0.52 and 0.04; the 1B figures are taken, re-checked against Table 2 on 3 Dec 2026)
# expert bias that DeepSeek-V3 trains with (DeepSeek-V3 Technical Report, sec. 2.1.2,
# "Auxiliary-Loss-Free Load Balancing"). Softmax top-k routers (Mixtral, Qwen3, gpt-oss, Llama 4)
# train with an auxiliary loss; sigmoid routers with a correction bias (DeepSeek-V3) without.
# estimated: a validation-set (global) figure applied per step; per-batch imbalance is higher.
DEFAULT_IMBALANCE = {"topk": 1.72, "sigmoid": 1.04}


def default_imbalance(moe: MoESpec) -> float:
    return DEFAULT_IMBALANCE.get(moe.router, DEFAULT_IMBALANCE["topk"])


def rank_load_factor(moe: MoESpec, ep: int, imbalance: float) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean rank's.

    >>> rank_load_factor(MoESpec(8, 2, 64), ep=8, imbalance=1.5)     # one expert per rank
    1.5
    >>> rank_load_factor(MoESpec(8, 2, 64), ep=1, imbalance=1.5)     # one rank holds them all
    1.0
    """
    busiest = max(1.0, imbalance if moe.capacity_factor is None else min(imbalance, moe.capacity_factor))
    held = moe.experts // ep                       # experts on a rank
    if moe.experts == 1:
        return busiest
    others = 1.0 - (busiest - 1.0) / (moe.experts - 1)     # the busiest expert's excess, taken from the rest
    return (busiest + (held - 1) * others) / held


def shard_experts(layer: LayerSpec, ep: int, load: float, whole_over_tp: int = 1) -> LayerSpec:
    """What the busiest of `ep` expert-parallel ranks runs and holds of an MoE block (already
    split by tensor/context parallelism): experts/ep of the experts, each GEMM over the rows
    the ep ranks route to it, `load` times the mean rank's tokens.

    whole_over_tp: the tensor-parallel size when experts are NOT split by it (expert tensor
    parallelism 1, Megatron-Core --expert-tensor-parallel-size 1): each TP rank then sends
    its 1/tp of the tokens (sequence parallel) through whole experts -- the same FLOP as the
    split GEMMs, with tp times the expert weights.
    """
    if layer.expert_params == 0 or (ep == 1 and load == 1.0 and whole_over_tp == 1):
        return layer
    t = whole_over_tp
    ops = []
    for op in layer.ops:
        if op.name in MOE_EXPERTS and t > 1 and op.gemm_mnk is not None:
            m, n, k = op.gemm_mnk
            n, k = (n, k * t) if op.name == "expert_down" else (n * t, k)
            op = replace(op, gemm_mnk=(max(1, m // t), n, k))
        if op.name in MOE_EXPERTS:
            groups = max(1, op.groups // ep)
            mnk = op.gemm_mnk
            if mnk is not None:
                mnk = (max(1, round(mnk[0] * ep * load)), mnk[1], mnk[2])
            weights = 0.0 if mnk is None else op.groups * mnk[1] * mnk[2]
            op = replace(op, flop=op.flop * load, elements_moved=(op.elements_moved - weights) * load + weights / ep,
                         gemm_mnk=mnk, groups=groups)
        ops.append(op)
    local_experts = layer.expert_params * t // ep
    return replace(layer, ops=tuple(ops), params=layer.params - layer.expert_params + local_experts,
                   expert_params=local_experts)


def experts_whole(placement: Placement) -> bool:
    """Expert tensor parallelism 1 under tp > 1: experts whole, expert parallelism over tp too."""
    return placement.etp == 1 and placement.tp > 1


def expert_groups(placement: Placement, ep: int, coords: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(expert-parallel group, expert-data-parallel group) of the rank at `coords`.

    Positions j = cp + CP x dp of the stage's data ranks (j = tp + TP x (cp + CP x dp) when
    experts are whole, expert tensor parallelism 1) are cut as j = e + ep x d (Megatron-Core's
    tp-ep-dp-pp expert order): ep peers share d, edp peers share e.
    """
    tp = placement.tp if experts_whole(placement) else 1
    cp = placement.cp
    j = (coords["tp"] if tp > 1 else 0) + tp * (coords["cp"] + cp * coords["dp"])

    def rank_at(position: int) -> int:
        inner = {"tp": position % tp} if tp > 1 else {}
        rest = position // tp
        return placement.rank(**{**coords, **inner, "cp": rest % cp, "dp": rest // cp})

    e, d = j % ep, j // ep
    ep_group = tuple(rank_at(i + ep * d) for i in range(ep))
    edp_group = tuple(sorted(rank_at(e + ep * i) for i in range(tp * placement.cp * placement.dp // ep)))
    return ep_group, edp_group
