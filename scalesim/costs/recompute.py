"""Per-op selective activation checkpointing, as torchtitan runs it (`selective_ac_option = "op"`).

Megatron-LM's selective recomputation (Korthikanti et al. 2022, sec. 5) re-runs
only the attention core; with flash attention, which stores no scores, it saves
nothing. torchtitan's per-op policy is different: each transformer block is
wrapped in `torch.utils.checkpoint` with a selective-checkpoint policy that
MUST_SAVEs the outputs of the ops in a save list and recomputes everything
else in backward (torchtitan `parallelisms/parallelize_llama.py` at 9dec370,
`_save_list` and `_custom_policy`, Dec 2024; later
`distributed/activation_checkpoint.py`):

- saved: the output of every *odd* `aten.mm` of the block (a counter per
  block; "Saves output of all compute ops, except every second mm"), the
  scaled-dot-product attention outputs, and tensor-parallel reduce-scatters;
- recomputed: every second `aten.mm` and every other op (norms, rotary
  embedding, SwiGLU, residual adds).

A Llama block issues its projections as separate mm calls in the order
wq, wk, wv, wo, w1, w3, w2, so wq, wv, w1, w2 and the attention output are
kept, and wk, wo, w3 re-run in backward. What the block holds for backward
is its input (kept by the checkpoint) plus those outputs; during its backward
the recomputation rebuilds the rest of the block, so one block's full
activations are live at a time, as under full checkpointing.

Pure functions over a layer's ops (already split by tensor / context
parallelism: the shapes are one GPU's). scalesim fuses q, k and v into one
`qkv` GEMM; it counts here as the three mm calls torchtitan issues, split by
the attention output's width (the `attn_out` GEMM's input).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

SELECTIVE_OP = "selective-op"
GEMM_KINDS = ("gemm", "conv")


def _q_width(layer: LayerSpec) -> int | None:
    """Columns of q (heads x head_dim, per GPU): the input width of the attention-output GEMM."""
    for op in layer.ops:
        if op.name == "attn_out" and op.gemm_mnk is not None:
            return op.gemm_mnk[2]
    return None


def matmul_calls(layer: LayerSpec) -> list[tuple[int, float, float]]:
    """The mm calls a block issues, in order: (op index, share of that op's work, output elements
    per sample). A fused `qkv` GEMM is three calls (q, k, v), split by the q width.

    >>> from scalesim.models.transformer import transformer_block
    >>> b = transformer_block("b", s=8, h=64, heads=4, kv_heads=1, f=128, ffn="swiglu", bias=False, norm="rmsnorm")
    >>> [(b.ops[i].name, round(share, 3)) for i, share, _ in matmul_calls(b)]
    [('qkv', 0.667), ('qkv', 0.167), ('qkv', 0.167), ('attn_out', 1.0), ('mlp_gate', 1.0), ('mlp_up', 1.0), ('mlp_down', 1.0)]
    """
    calls = []
    q = _q_width(layer)
    for i, op in enumerate(layer.ops):
        if op.kind not in GEMM_KINDS or op.gemm_mnk is None:
            continue
        m, n, _ = op.gemm_mnk
        if op.name == "qkv" and q is not None and 0 < q < n:
            kv = (n - q) / 2
            calls += [(i, q / n, m * q), (i, kv / n, m * kv), (i, kv / n, m * kv)]
        else:
            calls.append((i, 1.0, float(m * n * op.groups)))
    return calls


def recomputed_shares(layer: LayerSpec) -> list[float]:
    """Share of each op's forward work re-run in backward under per-op selective checkpointing:
    1 for non-matmul ops, 0 for attention (saved), the even mm calls' share for matmuls."""
    shares = [0.0 if op.kind == "attention" else (0.0 if op.kind in GEMM_KINDS else 1.0) for op in layer.ops]
    for position, (i, share, _) in enumerate(matmul_calls(layer), start=1):
        if position % 2 == 0:
            shares[i] += share
    return shares


def recomputed_kernels(layer: LayerSpec) -> int:
    """Kernels the recomputation launches: every non-matmul, non-attention op and each even mm call."""
    others = sum(1 for op in layer.ops if op.kind not in GEMM_KINDS and op.kind != "attention")
    return others + len(matmul_calls(layer)) // 2


def _attention_output_elements(layer: LayerSpec, ops: tuple[OpSpec, ...]) -> float:
    """Elements per sample the attention core writes: the input of the GEMM after it (attn_out)."""
    for op in ops:
        if op.name == "attn_out" and op.gemm_mnk is not None:
            m, _, k = op.gemm_mnk
            return float(m * k)
    return 0.0


def saved_bytes_per_sample(layer: LayerSpec, boundary_bytes_per_sample: float) -> float:
    """16-bit bytes one block keeps for backward per sample: its input, the odd mm calls'
    outputs (those a compiled block still keeps, `compiled_saves`) and the attention output (its fp32
    log-sum-exp, heads x s x 4 bytes, is left out)."""
    outputs = sum(elements for position, (i, _, elements) in enumerate(matmul_calls(layer), start=1)
                  if position % 2 == 1 and layer.ops[i].saved_output)
    has_attention = any(op.kind == "attention" for op in layer.ops)
    attention = _attention_output_elements(layer, layer.ops) if has_attention else 0.0
    return boundary_bytes_per_sample + 2.0 * (outputs + attention)


def recomputed_time_s(layer: LayerSpec, op_times_s: list[float]) -> float:
    """Forward time re-run in backward, given each op's forward time (in `layer.ops` order)."""
    return sum(t * share for t, share in zip(op_times_s, recomputed_shares(layer)))


def recomputed_blocks(layers, num_layers: int | None) -> tuple[bool, ...]:
    """Which of one pipeline chunk's layers full checkpointing recomputes when it is limited to
    `num_layers` blocks: Megatron-LM's `--recompute-method block --recompute-num-layers N`
    (megatron/core/transformer/transformer_block.py, `_checkpointed_forward`: per model chunk,
    the first N transformer layers checkpoint their input, the rest keep every activation;
    embedding and output layer are outside the block and never recomputed). None: every layer,
    scalesim's plain full checkpointing.

    >>> from scalesim.models.transformer import transformer_block, lm_head
    >>> b = transformer_block("b", s=8, h=64, heads=4, kv_heads=4, f=128, ffn="gelu", bias=True, norm="layernorm")
    >>> recomputed_blocks([b, b, b, lm_head(8, 64, 100, tied=False)], 2)
    (True, True, False, False)
    >>> recomputed_blocks([b, b], None)
    (True, True)
    """
    if num_layers is None:
        return tuple(True for _ in layers)
    mask, seen = [], 0
    for layer in layers:
        block = layer.kind == "transformer_block"
        mask.append(block and seen < num_layers)
        seen += block
    return tuple(mask)


# Megatron-Core's selective recomputation by module (`--recompute-granularity selective
# --recompute-modules ...`; TransformerConfig.recompute_modules, megatron/core/transformer/
# transformer_config.py): "core_attn" the attention core (the default, scalesim's plain
# `selective`), "moe_act" the experts' activation, "layernorm" the input and pre-MLP norms,
# "mla_up_proj" MLA's up projections and RoPE, "mlp" a dense block's MLP, "moe" the whole MoE layer,
# "shared_experts" the shared experts. moe_act, layernorm and mla_up_proj discard their outputs and
# re-run them in backward; core_attn, mlp, moe and shared_experts keep only their input. The ops of
# scalesim's blocks (models/transformer.py, models/moe.py) each module re-runs:
RECOMPUTE_MODULES = {
    "core_attn": ("attention",),
    "moe_act": ("expert_swiglu",),
    "layernorm": ("norm_attn", "norm_mlp"),
    "mla_up_proj": ("mla_q_up", "mla_kv_up", "rope", "rope_key"),
    "mlp": ("mlp_gate", "mlp_up", "swiglu", "gelu", "mlp_down"),
    "moe": ("router", "router_topk", "moe_permute", "expert_sort", "expert_gate", "expert_up", "expert_swiglu",
            "expert_down", "expert_bias", "expert_unsort", "moe_unpermute", "shared_gate", "shared_up",
            "shared_swiglu", "shared_down"),
    "shared_experts": ("shared_gate", "shared_up", "shared_swiglu", "shared_down"),
}
# Modules whose checkpoint keeps only the module's input (the rest discard one op's output).
WHOLE_MODULES = ("core_attn", "mlp", "moe", "shared_experts")
SUBSUMED = {"moe_act": "moe", "shared_experts": "moe"}      # parts of a module also listed


def module_ops(modules: tuple[str, ...]) -> frozenset[str]:
    """Names of the ops the listed recompute modules re-run.

    >>> sorted(module_ops(("layernorm", "moe_act")))
    ['expert_swiglu', 'norm_attn', 'norm_mlp']
    """
    return frozenset(name for module in modules for name in RECOMPUTE_MODULES[module])


def modules_of(op_names: set[str]) -> tuple[str, ...]:
    """The recompute modules that re-run something in a model with these ops (MLA's up projection
    only where there is MLA: outside it, RoPE belongs to the attention, not to mla_up_proj).

    >>> modules_of({"qkv", "rope", "attention", "norm_attn", "mlp_up", "gelu", "mlp_down"})
    ('core_attn', 'layernorm', 'mlp')
    """
    return tuple(module for module, ops in RECOMPUTE_MODULES.items()
                 if set(ops) - ({"rope", "rope_key"} if module == "mla_up_proj" else set()) & op_names)


def module_recompute_s(layer: LayerSpec, op_times_s: list[float], modules: tuple[str, ...]) -> float:
    """Forward time the listed modules re-run in backward, given each op's forward time."""
    names = module_ops(modules)
    return sum(t for op, t in zip(layer.ops, op_times_s) if op.name in names)


def _output_elements(op: OpSpec) -> float:
    """Elements per sample an op writes: a GEMM's m x n per group; an element-wise op or norm, the
    elements it moves over its inputs and output (one input for most, two for the gated activations)."""
    if op.gemm_mnk is not None:
        m, n, _ = op.gemm_mnk
        return float(m * n * op.groups)
    return op.elements_moved / (3.0 if op.name.endswith("swiglu") else 2.0)


def module_saved_bytes_per_sample(layer: LayerSpec, modules: tuple[str, ...]) -> float:
    """16-bit bytes per sample a block no longer keeps for backward when the listed modules are
    recomputed: the outputs of their ops, except, for a module kept by its input (WHOLE_MODULES), its
    last op's output (the next op's input, kept). The attention core's outputs are already left out of
    the flash-attention count; an estimate, capped by the block's activations by the caller."""
    saved = 0.0
    for module in modules:
        if module in SUBSUMED and SUBSUMED[module] in modules:
            continue
        names = RECOMPUTE_MODULES[module]
        outputs = [_output_elements(op) for op in layer.ops if op.name in names and op.kind != "attention"]
        if module in WHOLE_MODULES and outputs:
            outputs = outputs[:-1]
        saved += 2.0 * sum(outputs)
    return saved


# GEMMs whose output only feeds the residual add: the add's backward reads nothing, and neither does
# the GEMM's own (it needs its input and weight), so no backward op reads that output.
RESIDUAL_GEMMS = ("attn_out", "mlp_down")


def compiled_saves(model: ModelSpec) -> ModelSpec:
    """`model` as torch.compile runs the per-op policy: only outputs backward reads are kept.

    Eager, torch.utils.checkpoint's _CachingTorchDispatchMode stores the output of every op the
    policy marks MUST_SAVE as it runs, read or not. Compiled (torchtitan compiles each block, the
    checkpoint traced in), the policy only tags graph nodes, and AOTAutograd's partitioner saves the
    forward values the backward graph reads: w2's output (torchtitan's Llama, the block's last mm,
    an odd one, so MUST_SAVE) is read by no backward op and is not kept (RESIDUAL_GEMMS).

    >>> from scalesim.models import get_model
    >>> m = get_model("llama3-8b", seq_len=1024)
    >>> block = next(layer for layer in m.layers if layer.kind == "transformer_block")
    >>> kept = next(layer for layer in compiled_saves(m).layers if layer.kind == "transformer_block")
    >>> saved_bytes_per_sample(block, 0) - saved_bytes_per_sample(kept, 0) == 2 * 1024 * 4096
    True
    """
    def compiled(layer: LayerSpec) -> LayerSpec:
        if layer.kind != "transformer_block":
            return layer
        return replace(layer, ops=tuple(replace(op, saved_output=False) if op.name in RESIDUAL_GEMMS else op
                                        for op in layer.ops))
    return replace(model, layers=tuple(compiled(layer) for layer in model.layers))
