"""Megatron-Core's `activation_func_fp8_input_store` (training.fp8_activation_input_store): the SwiGLU's
input kept for backward in FP8, cast back before the backward computation.

What Megatron-Core does (NVIDIA/Megatron-LM @d98e8a64, megatron/core/fusions/fused_bias_swiglu.py; the
same code in the Megatron-LM that Fujitsu's MLPerf v4.0 LoRA submission vendors): the fused SwiGLU's
autograd Function (`SwiGLUFunction`, `BiasSwiGLUFunction`; `MLP.forward` passes
`self.config.activation_func_fp8_input_store` to `bias_swiglu_impl`, megatron/core/transformer/mlp.py)
saves `input.to(torch.float8_e4m3fn)` instead of `input` when the flag is on, and its backward starts with
`input.to(ctx.ori_input_dtype)`. The input is linear_fc1's output, gate and up side by side: 2 x ffn
columns (per tensor-parallel rank), s x 2f elements a sample. A plain cast, no scale: one byte an element
kept instead of two, and two eager elementwise kernels more, each reading and writing the tensor once
(forward: read 2 bytes, write 1; backward: read 1, write 2). TransformerConfig refuses the flag for any
activation but SwiGLU ("Storing activation input in FP8 is supported only for SwiGLU",
transformer_config.py __post_init__).

NVIDIA's MLPerf LoRA recipe sets it with FP8_ACT=1 (config_*.sh) -> `activation_func_fp8_input_store:
${oc.decode:${oc.env:FP8_ACT,0}}` (conf/megatron_gpt_peft_tuning_config.yaml) -> `llm.Llama2Config70B(
activation_func_fp8_input_store=cfg.model.activation_func_fp8_input_store, ...)` (train.py), from
MLPerf Training v5.0 on. The v4.0 recipe's key (`fp8_activation_input_store`, FP8_ACTIVATION=True, kept
by AMD's and MangoBoost's ports) is not a TransformerConfig field: NeMo's build_transformer_config copies
a model-config key only under a TransformerConfig field's name, so it sets nothing there.

Dense SwiGLU blocks only (the op named `swiglu`); the experts' SwiGLU, which Megatron-Core also stores
this way, is not modelled.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# The op of the two casts (split by ffn columns under tensor parallelism: parallel/sharding.py HEAD_SPLIT).
FP8_ACT_STORE_OP = "fp8_act_store"
STORED_BYTES = 1.0          # torch.float8_e4m3fn, no scale
OP_BYTES = 2.0              # ops count elements at the training precision's 2 bytes (compute.py ELEMENT_BYTES)
CAST_BYTES = 2.0 + 1.0      # each cast reads the tensor in one dtype and writes it in the other


def _swiglu_inputs(op: OpSpec) -> float:
    """Elements of the SwiGLU's input (gate and up) per sample: elementwise_op counts 2 inputs + 1 output."""
    return 2.0 * op.elements_moved / 3.0


def stored_saving(layer: LayerSpec) -> float:
    """Bytes per sample the block keeps less with its SwiGLU input stored in FP8.

    >>> from scalesim.models.transformer import transformer_block
    >>> b = transformer_block("b", s=8, h=16, heads=4, kv_heads=4, f=64, ffn="swiglu", bias=False)
    >>> stored_saving(b) == (2 - 1) * 8 * 2 * 64
    True
    """
    return sum((OP_BYTES - STORED_BYTES) * _swiglu_inputs(op) for op in layer.ops if op.name == "swiglu")


def _with_store(layer: LayerSpec) -> LayerSpec:
    if layer.kind != "transformer_block" or not any(op.name == "swiglu" for op in layer.ops):
        return layer
    ops = []
    for op in layer.ops:
        ops.append(op)
        if op.name == "swiglu":
            moved = _swiglu_inputs(op) * CAST_BYTES / OP_BYTES
            ops.append(OpSpec(FP8_ACT_STORE_OP, "elementwise", 0.0, moved, backward_elements=moved))
    return replace(layer, ops=tuple(ops), activation_bytes=layer.activation_bytes - stored_saving(layer))


def store_refusal(model: ModelSpec, saved_activations: str, elementwise_kernels: str,
                  recompute_modules: tuple[str, ...] = ()) -> str | None:
    """Why the FP8 store cannot be modelled for this model and these training keys (None: it can).

    >>> from scalesim.models import get_model
    >>> store_refusal(get_model("llama2-7b", seq_len=512), "megatron", "fused") is None
    True
    >>> "gpt3-1.3b has no SwiGLU" in store_refusal(get_model("gpt3-1.3b", seq_len=512), "megatron", "fused")
    True
    """
    if model.moe is not None or not any(op.name == "swiglu" for layer in model.layers for op in layer.ops):
        has = "experts" if model.moe is not None else "no SwiGLU"
        return (f"Megatron-Core stores the SwiGLU's input in FP8 (it refuses other activations), modelled for "
                f"dense SwiGLU blocks; {model.name} has {has}: allowed here: false")
    if saved_activations == "nanotron" or elementwise_kernels != "fused":
        return ("fp8_activation_input_store is Megatron-Core's fused SwiGLU kernel: it needs "
                "training.saved_activations megatron or transformer-engine and elementwise_kernels fused (got "
                f"{saved_activations}, {elementwise_kernels}); allowed here: false")
    if "mlp" in recompute_modules:
        return ("recompute module mlp keeps only the MLP's input, so no SwiGLU input is stored; allowed here: false "
                "(or leave mlp out of training.recompute_modules)")
    return None


def with_fp8_activation_store(model: ModelSpec, on: bool) -> ModelSpec:
    """`model` with its dense SwiGLU blocks keeping the SwiGLU input in FP8 and running its two casts when `on`
    (check `store_refusal` first).

    >>> from scalesim.models import get_model
    >>> m = get_model("llama2-7b", seq_len=512)
    >>> with_fp8_activation_store(m, False) is m
    True
    """
    if not on:
        return model
    return replace(model, layers=tuple(_with_store(layer) for layer in model.layers))
