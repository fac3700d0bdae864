"""Mixture-of-experts blocks and multi-head latent attention, as the MoE models of the zoo build them.

An MoE block is a transformer block whose MLP is replaced by (Shazeer et al.
2017; Fedus et al. 2022; Megatron-Core `moe/` with its all-to-all token dispatcher):

    router GEMM (s x experts) -> permute (gather each token's top_k copies by expert)
    -> grouped expert GEMMs (gate, up, down per expert, SwiGLU) -> unpermute (weighted sum)
    [+ shared experts every token goes through (DeepSeekMoE, Dai et al. 2024)]

Expert parallelism puts the dispatch all-to-all after the permute and the combine
all-to-all before the unpermute (`scalesim.parallel.builder`). Op names are what
`scalesim.parallel.sharding` splits by: expert ops start with "expert_", the MoE
half of the block is MOE_DISPATCH (before the dispatch), MOE_EXPERTS, then the rest.

Counts per sample of s tokens, as in `scalesim.models.transformer` (h hidden,
f expert width, E experts, k top_k). Expert GEMMs are grouped: E GEMMs of
m = s*k/E rows each (the mean; imbalance is the parallel plan's business).

>>> from scalesim.models.spec import MoESpec
>>> moe = MoESpec(experts=8, top_k=8, expert_ffn_hidden=64)
>>> ops = moe_mlp_ops(s=16, h=32, moe=moe, bias=False)
>>> sum(op.flop for op in ops if op.name.startswith("expert_") and op.kind == "gemm") == 3 * 2 * 16 * 32 * 8 * 64
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalesim.models.spec import LayerSpec, MoESpec, OpSpec
from scalesim.models.transformer import (SWIGLU_FLOP_PER_ELEMENT, block_activation_bytes, elementwise_op,
                                         gemm_op, norm_op, norm_params, transformer_block)

MOE_DISPATCH = ("norm_mlp", "router", "router_topk", "moe_permute")
MOE_EXPERTS = ("expert_gate", "expert_up", "expert_swiglu", "expert_down", "expert_bias")
# Experts with biases (gpt-oss): Transformer Engine's grouped fc2 returns its bias apart and Megatron-Core's
# TEGroupedMLP._apply_bias adds it, times each token's routing probability, in eager torch ops over the
# expert's rows: torch.cat([t + b * p for each local expert]) (NVIDIA/Megatron-LM
# megatron/core/transformer/moe/experts.py @0d8e0714, the Megatron-LM of Megatron Bridge v0.2.0, NeMo 25.11).
# Forward: b * p writes the rows, the add reads two and writes one, the cat reads and writes one: 6 passes
# over the rows; backward (b and p both learn): g * p and g * b each read g, write a product and sum it: 6.
# (fc1's bias is in TE's grouped GEMM, skip_bias_add=False.)
EXPERT_BIAS_PASSES = 6
# The all-to-all dispatcher's second permutation: received tokens sorted by local expert after the
# dispatch and back before the combine (`scalesim.parallel.experts.dispatcher_ops`).
MOE_SORTS = ("expert_sort", "expert_unsort")
ROUTERS = ("topk", "sigmoid")      # softmax top-k (Mixtral, Qwen3, gpt-oss); sigmoid + bias (DeepSeek-V3)
# Routing: softmax or sigmoid over the experts, top-k selection, normalisation: a few FLOP per score.
ROUTER_FLOP_PER_SCORE = 6


def grouped_gemm_op(name: str, groups: int, rows: float, n: int, k: int) -> OpSpec:
    """`groups` GEMMs sharing `rows` rows in all (each rows/groups x n x k): the experts' grouped GEMM."""
    per = max(1, round(rows / groups))
    moved = rows * k + groups * k * n + rows * n
    return OpSpec(name, "gemm", 2.0 * rows * n * k, float(moved), (per, n, k), groups=groups)


def expert_params(h: int, f: int, bias: bool) -> int:
    """One SwiGLU expert: gate and up (h x f), down (f x h), plus biases (gpt-oss)."""
    return 3 * h * f + ((2 * f + h) if bias else 0)


def moe_mlp_ops(*, s: int, h: int, moe: MoESpec, bias: bool) -> list[OpSpec]:
    """The MoE MLP's forward ops for one sample, after the MLP norm and before the residual."""
    e, k, f = moe.experts, moe.top_k, moe.expert_ffn_hidden
    routed = s * k                                   # token copies the experts process
    # the router is no FP8 linear (Megatron-Core's TopKRouter: torch's linear, in fp32 or 16 bits): casts nothing
    ops = [replace(gemm_op("router", s, e, h, bias=router_bias(moe, bias)), cast_share=0.0, grad_cast_share=0.0),
           elementwise_op("router_topk", s * e, flop_per_element=ROUTER_FLOP_PER_SCORE),
           elementwise_op("moe_permute", routed * h)]
    ops += [grouped_gemm_op("expert_gate", e, routed, f, h),      # one fc1 GEMM in TE: one FP8 cast of its input
            replace(grouped_gemm_op("expert_up", e, routed, f, h), cast_share=0.0),
            elementwise_op("expert_swiglu", routed * f, inputs=2, flop_per_element=SWIGLU_FLOP_PER_ELEMENT),
            grouped_gemm_op("expert_down", e, routed, h, f)]
    if bias:
        ops.append(OpSpec("expert_bias", "elementwise", 2.0 * routed * h, float(EXPERT_BIAS_PASSES * routed * h),
                          backward_elements=float(EXPERT_BIAS_PASSES * routed * h)))
    ops.append(elementwise_op("moe_unpermute", s * h, inputs=k + 1, flop_per_element=2 * k))
    if moe.shared_experts:
        fs = (moe.shared_ffn_hidden or f) * moe.shared_experts
        ops += [gemm_op("shared_gate", s, fs, h), replace(gemm_op("shared_up", s, fs, h), cast_share=0.0),
                elementwise_op("shared_swiglu", s * fs, inputs=2, flop_per_element=SWIGLU_FLOP_PER_ELEMENT),
                gemm_op("shared_down", s, h, fs)]
    return ops


def router_bias(moe: MoESpec, bias: bool) -> bool:
    return bias or moe.router == "sigmoid"


def moe_mlp_params(h: int, moe: MoESpec, bias: bool) -> tuple[int, int, int]:
    """(all, routed experts', active) parameters of the MoE MLP: router, experts, shared experts."""
    # the weight, and its bias (gpt-oss) or expert-score correction bias (DeepSeek-V3)
    router = h * moe.experts + (moe.experts if router_bias(moe, bias) else 0)
    routed = moe.experts * expert_params(h, moe.expert_ffn_hidden, bias)
    shared = moe.shared_experts * expert_params(h, moe.shared_ffn_hidden or moe.expert_ffn_hidden, False)
    active = router + shared + moe.top_k * expert_params(h, moe.expert_ffn_hidden, bias)
    return router + routed + shared, routed, active


def moe_activation_bytes(s: int, h: int, moe: MoESpec) -> float:
    """Bytes the MoE MLP keeps for backward, one sample, 16-bit (the MLP terms of Korthikanti
    et al. 2022 applied to each token copy): router input 2sh, permuted tokens 2skh, gate and
    up outputs and their product 3 x 2skf, expert outputs 2skh for the weighted sum, dropout
    mask sh; shared experts as a dense SwiGLU MLP (2sh + 6s f_shared)."""
    k, f = moe.top_k, moe.expert_ffn_hidden
    fs = (moe.shared_ffn_hidden or f) * moe.shared_experts
    shared = (2 * s * h + 6 * s * fs) if fs else 0
    return float(3 * s * h + 4 * s * k * h + 6 * s * k * f + shared)


@dataclass(frozen=True, slots=True)
class MLASpec:
    """DeepSeek's multi-head latent attention (DeepSeek-V2/V3 config.json names): queries and
    keys/values go through low-rank latents (q_lora_rank, kv_lora_rank) with their own norms;
    heads have a no-position part (qk_nope_head_dim) and a rotary part (qk_rope_head_dim,
    its key shared by all heads), and values of v_head_dim."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


def mla_ops(s: int, h: int, heads: int, mla: MLASpec, causal: bool) -> tuple[list[OpSpec], int]:
    """MLA's forward ops (norm before, residual after excluded) and its parameters.

    Down-projections (q_a, kv_a with the shared rotary key) are replicated under
    tensor parallelism in Megatron-Core's MLA; the up-projections split by heads.
    """
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    q_up, kv_up = heads * qk, heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    kv_down = mla.kv_lora_rank + mla.qk_rope_head_dim
    ops = [gemm_op("mla_q_down", s, mla.q_lora_rank, h), gemm_op("mla_kv_down", s, kv_down, h),
           elementwise_op("mla_norms", s * (mla.q_lora_rank + mla.kv_lora_rank), flop_per_element=4),
           gemm_op("mla_q_up", s, q_up, mla.q_lora_rank), gemm_op("mla_kv_up", s, kv_up, mla.kv_lora_rank),
           elementwise_op("rope", s * heads * mla.qk_rope_head_dim * 2, flop_per_element=3),
           # QK^T over qk-wide heads, AV over v-wide heads; flash attention's reads and writes
           OpSpec("attention", "attention", 2.0 * s * s * heads * (qk + mla.v_head_dim),
                  float(s * (q_up + kv_up + heads * mla.v_head_dim)), score_elements=float(heads * s * s),
                  causal=causal, head_dims=(qk, mla.v_head_dim), seq=s),
           gemm_op("attn_out", s, h, heads * mla.v_head_dim)]
    params = (h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * q_up + h * kv_down + mla.kv_lora_rank
              + mla.kv_lora_rank * kv_up + heads * mla.v_head_dim * h)
    return ops, params


ATTENTION_OPS = ("qkv", "rope", "attention", "attn_out")


def moe_block(name: str, *, moe: MoESpec | None, mla: MLASpec | None, **block) -> LayerSpec:
    """A transformer block (`transformer.transformer_block` arguments) with the MoE MLP (when
    `moe` is given) and multi-head latent attention (when `mla` is given)."""
    dense = transformer_block(name, **block)
    s, h, f, heads = block["s"], block["h"], block["f"], block["heads"]
    bias, norm = block.get("bias", True), block.get("norm", "layernorm")
    ffn = block.get("ffn", "gelu")
    mlp_dense = (3 * h * f + ((2 * f + h) if bias else 0) if ffn == "swiglu"
                 else 2 * h * f + ((f + h) if bias else 0))
    attn_params = dense.params - mlp_dense - 2 * norm_params(h, norm)
    d = block.get("head_dim") or h // heads
    kv_dim = block["kv_heads"] * d
    attn_ops = [op for op in dense.ops if op.name in ATTENTION_OPS]
    if mla is not None:
        attn_ops, attn_params = mla_ops(s, h, heads, mla, block.get("causal", True))
        kv_dim = heads * (mla.qk_nope_head_dim + mla.v_head_dim) // 2
    attention_part = [op for op in dense.ops if op.name == "norm_attn"] + attn_ops + \
        [op for op in dense.ops if op.name in ("residual_attn", "norm_mlp")]
    attention_acts = block_activation_bytes(s, h, kv_dim, 0, "gelu") - 3 * s * h   # attention and norms only
    if moe is None:
        mlp = [op for op in dense.ops if op.name.startswith("mlp_") or op.name in ("gelu", "swiglu")]
        mlp_params, routed, active = mlp_dense, 0, None
        mlp_acts = dense.activation_bytes - attention_acts
    else:
        mlp = moe_mlp_ops(s=s, h=h, moe=moe, bias=bias)
        mlp_params, routed, active_mlp = moe_mlp_params(h, moe, bias)
        active = attn_params + active_mlp + 2 * norm_params(h, norm)
        mlp_acts = moe_activation_bytes(s, h, moe)
    ops = attention_part + mlp + [op for op in dense.ops if op.name == "residual_mlp"]
    params = attn_params + mlp_params + 2 * norm_params(h, norm)
    return LayerSpec(name, "transformer_block", params, tuple(ops), activation_bytes=attention_acts + mlp_acts,
                     attention_score_bytes=dense.attention_score_bytes, expert_params=routed,
                     active_params=active)


# Multi-token prediction (DeepSeek-V3 Technical Report, sec. 2.2, Fig. 3; Megatron-Core
# transformer/multi_token_prediction.py): each MTP module embeds the tokens one position ahead with the
# shared embedding, normalises them and the previous depth's hidden states (enorm, hnorm: RMSNorm),
# projects their concatenation 2h -> h (eh_proj), runs one transformer block (an MoE block in
# DeepSeek-V3), a final norm and the shared output head with its own cross-entropy loss. Megatron places
# the modules after the decoder on the last pipeline stage, which holds a copy of the embedding (kept in
# sync like tied embeddings); the output head's weights are the main head's on that stage (0 here).
MTP_PREFIX = "mtp"


def is_mtp(layer: LayerSpec) -> bool:
    """Whether the layer is part of a multi-token-prediction module (not a decoder block)."""
    return layer.name.startswith(MTP_PREFIX)


def mtp_layers(index: int, *, embedding: LayerSpec, block: LayerSpec, final: LayerSpec, head: LayerSpec,
               s: int, h: int) -> tuple[LayerSpec, ...]:
    """The layers of MTP module `index`: the embedding copy, norms and projection, its block, final
    norm and head. `embedding`, `final` and `head` are the model's own (their weights are shared)."""
    name = f"{MTP_PREFIX}{index}"
    proj = LayerSpec(f"{name}_proj", "norm", 2 * norm_params(h, "rmsnorm") + 2 * h * h,
                     (norm_op("mtp_enorm", s * h, h, "rmsnorm"), norm_op("mtp_hnorm", s * h, h, "rmsnorm"),
                      gemm_op("mtp_eh_proj", s, h, 2 * h)),
                     activation_bytes=float(2 * 2 * s * h + 2 * 2 * s * h))   # norm inputs, projection input
    return (replace(embedding, name=f"{name}_embed", active_params=0), proj, replace(block, name=name),
            replace(final, name=f"{name}_norm"), replace(head, name=f"{name}_head", params=0))
