"""What one GPU computes of a layer under tensor, sequence and context parallelism.

Megatron-LM tensor parallelism (Shoeybi et al. 2019) splits each block's QKV
and MLP-up/gate GEMMs by columns and the attention-output and MLP-down GEMMs
by rows, and the attention heads, across TP GPUs; the embedding and output
head are split along the vocabulary. Norms, residual adds and dropout are
replicated unless sequence parallelism (Korthikanti et al. 2022) splits them
along the sequence. Context parallelism splits the sequence itself: each GPU
runs its 1/CP of the tokens through every GEMM and attends to all keys.

Activation memory per GPU follows Korthikanti et al. 2022 eq. 2-4: with TP
and no SP, 10 of a block's 34 sbh bytes stay whole and 24 are split; with SP
all 34 are split; attention scores are split across heads.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.float8_casts import FLOAT8_ATTENTION_HALF, FLOAT8_HEAD_SPLIT, FLOAT8_WHOLE
from scalesim.costs.fp8_act_store import FP8_ACT_STORE_OP
from scalesim.costs.projections import GRAD_SUM_OPS
from scalesim.models.moe import MOE_DISPATCH, MOE_EXPERTS, MOE_SORTS
from scalesim.models.softcap import FINAL_SOFTCAP_OPS
from scalesim.models.spec import LayerSpec, OpSpec

# MoE experts split as the MLP does (expert tensor parallelism = tp, Megatron-Core's default);
# MLA's up-projections split by heads, its down-projections and the router are replicated.
COLUMN_PARALLEL = ("qkv", "mlp_up", "mlp_gate", "expert_gate", "expert_up", "shared_gate", "shared_up",
                   "mla_q_up", "mla_kv_up")
ROW_PARALLEL = ("attn_out", "mlp_down", "expert_down", "shared_down")
# split heads / ffn columns (attention_layout, cross_entropy_pass: nanotron's copies, costs/nanotron_kernels.py)
HEAD_SPLIT = ("attention", "rope", "gelu", "swiglu", "expert_swiglu", "shared_swiglu", "attention_layout",
              FP8_ACT_STORE_OP, *FLOAT8_HEAD_SPLIT)
VOCAB_SPLIT = ("lm_head", "cross_entropy", "token_embedding", "mlm_decoder", "cross_entropy_pass", *FINAL_SOFTCAP_OPS)
# Run whole by every TP rank, over the whole sequence even under sequence parallelism: MLA's one rotary
# key for all heads, unfused (costs/mla_rope.py); torchao's transposes of float8 all-gathered tensors
# (costs/float8_casts.py); the sums of separate projections' data gradients (costs/projections.py)
TP_WHOLE = ("rope_key", *FLOAT8_WHOLE, *GRAD_SUM_OPS)
ATTENTION_HALF = ("norm_attn", "qkv", "rope", "rope_key", "attention_layout", "attention", "attn_out", "norm_attn_post",
                  "dropout_attn", "residual_attn", "mla_q_down", "mla_kv_down", "mla_norms", "mla_q_up", "mla_kv_up",
                  "grad_sum_qkv", *FLOAT8_ATTENTION_HALF)
# An MoE block's MLP half, cut where expert parallelism's all-to-alls go (scalesim/models/moe.py):
# router and permute, then (dispatch) the experts (with the all-to-all dispatcher's sorts by local
# expert), then (combine) unpermute and shared experts.
MOE_DISPATCH_PART, MOE_EXPERT_PART = MOE_DISPATCH, MOE_SORTS[:1] + MOE_EXPERTS + MOE_SORTS[1:]
# Korthikanti et al. 2022: of 34 sbh bytes per block, 10 are not split by TP
# without sequence parallelism (layer-norm inputs, dropout masks, residuals).
UNSPLIT_ACTIVATION_SHARE = 10 / 34


def _shard_op(op: OpSpec, tp: int, cp: int, sp: bool) -> OpSpec:
    m = n = k = None
    if op.gemm_mnk is not None:
        m, n, k = op.gemm_mnk
        m = max(1, m // cp)
    flop = op.flop / cp
    moved = op.elements_moved / cp
    scores = op.score_elements / cp
    if op.name in COLUMN_PARALLEL or op.name in VOCAB_SPLIT and op.gemm_mnk is not None:
        n = max(1, n // tp)
        flop, moved = flop / tp, moved / tp
    elif op.name in ROW_PARALLEL:
        k = max(1, k // tp)
        flop, moved = flop / tp, moved / tp
    elif op.name in HEAD_SPLIT or op.name in VOCAB_SPLIT:
        flop, moved, scores = flop / tp, moved / tp, scores / tp
    elif sp and op.name not in TP_WHOLE:
        flop, moved = flop / tp, moved / tp
    back = (None if op.backward_elements is None      # split as its forward is
            else op.backward_elements * moved / op.elements_moved if op.elements_moved else 0.0)
    return replace(op, flop=flop, elements_moved=moved, score_elements=scores, backward_elements=back,
                   gemm_mnk=None if op.gemm_mnk is None else (m, n, k),
                   ring_steps=cp if op.kind == "attention" and not op.cp_a2a else op.ring_steps)


# Column-parallel GEMMs that read the block's sequence-parallel all-gathered input, and the one of
# them that casts it to FP8 (its siblings read the same FP8 tensor).
SP_GATHERED_INPUT = {"qkv": "qkv", "mlp_gate": "mlp_gate", "mlp_up": "mlp_gate"}


def _sp_fp8_casts(ops: tuple[OpSpec, ...], tp: int) -> tuple[OpSpec, ...]:
    """Under sequence parallelism the FP8 recipes cast a column-parallel GEMM's input once, on the
    local 1/tp shard, and all-gather it in FP8 (scalesim's TP all-gather moves it so in the
    batch-first layout, parallel/sp_layout.py; in seq-first at 16 bits): torchao's
    PrepareFloat8ModuleInput / Float8ColwiseParallel, which torchtitan applies to wq/wk/wv and
    w1/w3 ("the float8 cast happens before the all-gather ... so that if there are multiple float8
    users of the input activation, we perform fp8 allgather only once", torchao/float8/
    float8_tensor_parallel.py); Transformer Engine's LayerNormLinear / LayerNormMLP gather their
    norm output in FP8 likewise. So the first such GEMM casts 1/tp of its m x k input and its
    siblings (a gated MLP's up projection) none, where each would otherwise cast all of it."""
    names = {op.name for op in ops}
    out = []
    for op in ops:
        caster = SP_GATHERED_INPUT.get(op.name)
        if caster is None or op.gemm_mnk is None:
            out.append(op)
            continue
        first = caster == op.name or caster not in names
        out.append(replace(op, cast_share=op.cast_share / tp if first else 0.0))
    # a row-parallel GEMM's output gradient is cast on its shard and all-gathered in FP8 (TE
    # grad_output_preprocess, costs/fp8_grad_casts.py); not the routed experts': Megatron-Core builds their TE
    # linears with parallel_mode None (explicit_expert_comm), the token dispatcher gathers their gradient in 16 bits
    return tuple(replace(op, grad_cast_share=op.grad_cast_share / tp)
                 if op.name in ROW_PARALLEL and op.name != "expert_down" else op for op in out)


def _shard_ops(ops: tuple[OpSpec, ...], tp: int, cp: int, sp: bool) -> tuple[OpSpec, ...]:
    sharded = tuple(_shard_op(op, tp, cp, sp) for op in ops)
    return _sp_fp8_casts(sharded, tp) if sp and tp > 1 else sharded


def shard_layer(layer: LayerSpec, tp: int, cp: int, sp: bool, memo: dict | None = None) -> LayerSpec:
    """The part of `layer` one GPU runs and holds. `memo`: the caller's cache of sharded ops (a
    model repeats one block tens of times; a sweep shards the same blocks for hundreds of plans)."""
    if tp == 1 and cp == 1:
        return layer
    if memo is not None:        # this very layer sharded before (a command's model is reused by its plans)
        known = memo.get(("sharded-layer", id(layer), tp, cp, sp))
        if known is not None and known[0] is layer:
            return known[1]
        sharded = _sharded_layer(layer, tp, cp, sp, memo)
        memo[("sharded-layer", id(layer), tp, cp, sp)] = (layer, sharded)       # the layer kept: its id stays its own
        return sharded
    return _sharded_layer(layer, tp, cp, sp, memo)


def _sharded_layer(layer: LayerSpec, tp: int, cp: int, sp: bool, memo: dict | None) -> LayerSpec:
    if memo is None:
        ops = _shard_ops(layer.ops, tp, cp, sp)
    else:
        key = ("sharded-ops", layer.ops, tp, cp, sp)
        ops = memo.get(key)
        if ops is None:
            ops = memo[key] = _shard_ops(layer.ops, tp, cp, sp)
    if layer.kind == "transformer_block":
        share = 1 / tp if sp else UNSPLIT_ACTIVATION_SHARE + (1 - UNSPLIT_ACTIVATION_SHARE) / tp
        acts = layer.activation_bytes * share / cp
        params = layer.params // tp
        layer = replace(layer, expert_params=layer.expert_params // tp)
    else:
        acts = layer.activation_bytes / (tp if sp or layer.kind in ("head", "embedding") else 1) / cp
        params = layer.params // tp if layer.kind in ("head", "embedding") else layer.params
    return replace(layer, ops=ops, params=params, activation_bytes=acts,
                   attention_score_bytes=layer.attention_score_bytes / tp / cp)


def split_attention_mlp(layer: LayerSpec, memo: dict | None = None) -> tuple[LayerSpec, LayerSpec]:
    """A block as its attention half and MLP half (Megatron's two TP all-reduces sit after each).
    `memo`: the caller's, where this very layer's halves are kept (`shard_layer` returns the same
    sharded block to every plan of a command)."""
    if memo is not None:
        known = memo.get(("halves", id(layer)))
        if known is None or known[0] is not layer:
            known = memo[("halves", id(layer))] = (layer, split_attention_mlp(layer))     # the layer kept
        return known[1]
    first = tuple(op for op in layer.ops if op.name in ATTENTION_HALF)
    second = tuple(op for op in layer.ops if op.name not in ATTENTION_HALF)
    return (replace(layer, name=f"{layer.name}.attn", ops=first),
            replace(layer, name=f"{layer.name}.mlp", ops=second))


def split_moe(layer: LayerSpec) -> tuple[LayerSpec, ...]:
    """An MoE block as attention, router + permute, experts, and unpermute + shared experts."""
    def part(suffix: str, keep) -> LayerSpec:
        return replace(layer, name=f"{layer.name}.{suffix}", ops=tuple(op for op in layer.ops if keep(op.name)))

    return (part("attn", lambda n: n in ATTENTION_HALF),
            part("route", lambda n: n in MOE_DISPATCH_PART),
            part("experts", lambda n: n in MOE_EXPERT_PART),
            part("combine", lambda n: n not in ATTENTION_HALF + MOE_DISPATCH_PART + MOE_EXPERT_PART))
