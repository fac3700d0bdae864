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

import math
from dataclasses import replace

from scalesim.models.moe import MOE_EXPERTS, MOE_SORTS
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


# Token dispatchers of Megatron-Core (megatron/core/transformer/moe/token_dispatcher.py at the
# commit of Megatron-LM's GB200 DeepSeek-V3 guide, effebd81):
# - alltoall (MoEAlltoAllTokenDispatcher; Megatron Bridge's model default): the tokens are copied
#   top_k times by expert ("permutation 1") and every copy goes through NCCL's all-to-all; with more
#   than one local expert the received copies are then sorted by local expert ("permutation 2",
#   sort_chunks_by_idxs in dispatch_postprocess) and sorted back before the combine
#   (combine_preprocess), two more passes over the rank's routed tokens.
# - flex (MoEFlexTokenDispatcher with the DeepEP or HybridEP backend: --moe-token-dispatcher-type flex):
#   the communication kernel sends each token once to every rank holding one of its experts and the
#   combine sums each rank's experts before sending back (DeepEP's is_token_in_rank layout; HybridEP
#   "ensures there is no redundant communication during data distribution", Megatron-LM
#   docs/discussions/deepseek-v3-gb200-optimization, sec. 2.5); the receiving rank permutes its tokens
#   to its experts once (get_permuted_hidden_states_by_experts), no second sort.
DISPATCHERS = ("alltoall", "flex")


def dispatch_copies(moe: MoESpec, ep: int, dispatcher: str) -> float:
    """Copies of each token the dispatch all-to-all carries (the combine carries as many back):
    top_k for the all-to-all dispatcher; for flex, the expected number of distinct expert-parallel
    ranks among a token's top_k experts, with experts picked uniformly (forced balance) -- each
    rank holds experts/ep of them, so a rank is missed with probability C(E - E/ep, k) / C(E, k);
    under group-limited routing from the group_topk groups a token may use (`_hit_probability`).

    >>> dispatch_copies(MoESpec(128, 8, 768), ep=8, dispatcher="alltoall")
    8
    >>> round(dispatch_copies(MoESpec(128, 8, 768), ep=8, dispatcher="flex"), 2)
    5.34
    >>> dispatch_copies(MoESpec(8, 2, 64), ep=8, dispatcher="flex")     # one expert per rank: no repeat
    2.0
    """
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"dispatcher must be one of {DISPATCHERS}, not {dispatcher!r}")
    if dispatcher == "alltoall" or ep <= 1:
        return moe.top_k
    return ep * _hit_probability(moe, ep)


def _hit_probability(moe: MoESpec, parts: int) -> float:
    """Chance that a token uses at least one expert of one of `parts` equal consecutive blocks of the
    experts (a rank's, or a server's), the top_k experts uniform over those the token may use: all
    of them, or under group-limited routing the experts of group_topk groups picked uniformly (forced
    balance randomises the router logits and still applies the group limit: Megatron-Core
    transformer_config.py, moe_router_force_load_balancing, "supports naive topk and group-limited
    topk"). Blocks that do not split into whole groups, or groups into whole blocks, are taken
    without the limit."""
    e, k, held = moe.experts, moe.top_k, moe.experts // parts
    g, gk = moe.groups, moe.group_topk
    per_group = e // g
    if g <= 1 or not 0 < gk < g or e % g or (held % per_group and per_group % held):
        return 1.0 - math.comb(e - held, k) / math.comb(e, k)
    usable = gk * per_group                         # experts of the groups a token may use
    if held <= per_group:                           # the block inside one group
        return gk / g * (1.0 - math.comb(usable - held, k) / math.comb(usable, k))
    h = held // per_group                           # whole groups in the block: j of them chosen
    return sum(math.comb(h, j) * math.comb(g - h, gk - j) / math.comb(g, gk)
               * (1.0 - math.comb(usable - j * per_group, k) / math.comb(usable, k)) for j in range(1, min(h, gk) + 1))


def network_share(moe: MoESpec, ep: int, servers: int, dispatcher: str) -> float:
    """The flex dispatcher's bytes between servers over those of an all-to-all of its rank copies.

    DeepEP's internode kernels send a token over RDMA once to each server that holds one of its
    experts, to the GPU of the sender's index there, which forwards it over NVLink to the ranks of
    its experts; the combine sums them on that GPU and sends one copy back (deepseek-ai/DeepEP
    README, "kernels optimized for asymmetric-domain bandwidth forwarding, such as forwarding data
    from NVLink domain to RDMA domain", aligned with DeepSeek-V3's group-limited gating; buffer.py
    get_dispatch_layout: num_tokens_per_rdma_rank, "tokens to be sent to each RDMA rank (with the
    same GPU index)"). So the network carries the expected distinct servers per token instead of
    the distinct ranks (`dispatch_copies`); 1.0 for the all-to-all dispatcher or one server.

    >>> round(network_share(MoESpec(256, 8, 2048, groups=8, group_topk=4), ep=64, servers=8, dispatcher="flex"), 3)
    0.493
    >>> network_share(MoESpec(256, 8, 2048), ep=64, servers=8, dispatcher="alltoall")
    1.0
    """
    if dispatcher != "flex" or servers <= 1 or ep % servers or moe.experts % servers:
        return 1.0
    return servers * _hit_probability(moe, servers) / dispatch_copies(moe, ep, dispatcher)


def dispatcher_ops(layer: LayerSpec, ep: int, load: float, dispatcher: str) -> LayerSpec:
    """The all-to-all dispatcher's sorts by local expert (memory passes like the permute, over the
    busiest rank's `load` times the mean routed tokens) around the experts, when a rank holds more
    than one expert; the layer unchanged otherwise."""
    permute = next((op for op in layer.ops if op.name == "moe_permute"), None)
    gate = next((op for op in layer.ops if op.name == MOE_EXPERTS[0]), None)
    if dispatcher != "alltoall" or permute is None or gate is None or gate.groups <= 1:
        return layer
    sort, unsort = (replace(permute, name=n, flop=permute.flop * load, elements_moved=permute.elements_moved * load)
                    for n in MOE_SORTS)
    last = [op.name for op in layer.ops if op.name in MOE_EXPERTS][-1]     # the expert bias, when there is one
    ops: list = []
    for op in layer.ops:
        ops += [sort, op] if op.name == MOE_EXPERTS[0] else [op, unsort] if op.name == last else [op]
    return replace(layer, ops=tuple(ops))


def shard_experts(layer: LayerSpec, ep: int, load: float, whole_over_tp: int = 1,
                  dispatcher: str = "alltoall") -> LayerSpec:
    """What the busiest of `ep` expert-parallel ranks runs and holds of an MoE block (already
    split by tensor/context parallelism): experts/ep of the experts, each GEMM over the rows
    the ep ranks route to it, `load` times the mean rank's tokens.

    whole_over_tp: the tensor-parallel size when experts are NOT split by it (expert tensor
    parallelism 1, Megatron-Core --expert-tensor-parallel-size 1): each TP rank then sends
    its 1/tp of the tokens (sequence parallel) through whole experts -- the same FLOP as the
    split GEMMs, with tp times the expert weights. `dispatcher` adds its own passes
    (`dispatcher_ops`).
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
            back = None if op.backward_elements is None else op.backward_elements * load   # over its rows too
            op = replace(op, flop=op.flop * load, elements_moved=(op.elements_moved - weights) * load + weights / ep,
                         backward_elements=back, gemm_mnk=mnk, groups=groups)
        ops.append(op)
    local_experts = layer.expert_params * t // ep
    sharded = replace(layer, ops=tuple(ops), params=layer.params - layer.expert_params + local_experts,
                      expert_params=local_experts)
    return dispatcher_ops(sharded, ep, load, dispatcher)


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
