"""Transformer Engine's LayerNormLinear under delayed scaling: the norm writes the FP8 input of the GEMM after it,
so that input has no cast kernel of its own. Pure functions; fp8_grad_casts.py forward_cast prices the marked GEMMs.

Megatron-Core's Transformer Engine layer spec (its default) builds linear_qkv and the dense linear_fc1 as
TELayerNormColumnParallelLinear, the block's norms inside them (megatron/core/models/gpt/gpt_layer_specs.py:169,
:371-383 @core_v0.14.0 23e00ed0). TE's LayerNormLinear (transformer_engine/pytorch/module/layernorm_linear.py
@release_v2.8 40c69e75) hands the linear's input quantizer to the norm, `with_quantized_norm = fp8 and not
return_layernorm_output ...` (:198-203, :207-218), and what the norm then runs depends on the recipe
(pytorch/csrc/extensions/normalization.cpp: layernorm_fwd :96-131, rmsnorm_fwd :320-355):

- delayed scaling (Float8Quantizer, scalesim's `transformer-engine`): FULLY_FUSED, the norm kernel writes FP8
  (1 byte an element instead of 2) and there is no cast kernel. Where FP8 GEMMs are TN-only and the weight
  gradient needs the columnwise copy, that copy is a transpose kernel of its own after the norm (common/
  normalization/rmsnorm/rmsnorm_api.cpp:96-104 and layernorm/ln_api.cpp:111-116: `nvte_transpose`, read 1 and write 1
  an element) instead of a byte written by the cast; under sequence parallelism the shard is gathered in FP8
  rowwise and the gathered tensor transposed, as for any cast shard (costs/fp8_grad_casts.py);
- current scaling (Float8CurrentScalingQuantizer): FUSED_NORM_AMAX_FP8, the norm writes 16 bits and the amax,
  then `quantize_with_amax` casts in a kernel of its own (costs/fp8_current_scaling.py: the cast stays, the amax
  pass goes); with NVTE_NORM_FWD_USE_CUDNN=1, UNFUSED (norm, then the full quantize);
- MXFP8: UNFUSED (norm in 16 bits, then quantize) unless NVTE_NORM_FWD_USE_CUDNN=1 and both dimensions are
  multiples of 128 (cuDNN's MXFP8 norm): left as a cast of its own (costs/fp8_grad_casts.py).

So only delayed scaling loses the casts, and only of GEMMs a norm feeds directly: qkv and fc1 (`mlp_gate` in a
SwiGLU block, whose `mlp_up` casts nothing, `mlp_up` in a GELU one), not MLA's down projections (TELinear after
a TENorm), nor the experts (GroupedLinear after the router) or shared experts. The norm's output must not be
wanted in 16 bits: NeMo's LoRA without the op fuser asks the LayerNormLinear for it (`return_layernorm_output`)
wherever an adapter reads the block input, and the cast is then TE's own kernel again (`norm_outputs_asked`).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.adapters import ADAPTER_INPUT
from scalesim.models.spec import LayerSpec, ModelSpec

NORM_WRITE_SAVED = 1.0     # the fused norm writes FP8, 1 byte an element instead of 2
NORM_FED = ("qkv", "mlp_gate", "mlp_up")         # LayerNormLinear's GEMMs (linear_qkv, linear_fc1)
# the block input an adapter reads (costs/adapters.py ADAPTER_INPUT) -> the LayerNormLinear GEMMs it is fed to
ASKED_BY = {"attention_in": ("qkv",), "mlp_in": ("mlp_gate", "mlp_up")}


def _fused_layer(layer: LayerSpec) -> LayerSpec:
    ops = layer.ops
    if layer.kind != "transformer_block" or not ops or ops[0].kind != "norm":      # pre-norm blocks only
        return layer
    fed = {i for i, op in enumerate(ops) if i and op.name in NORM_FED and op.gemm_mnk is not None
           and op.cast_share > 0 and ops[i - 1].kind == "norm"}
    if not fed:
        return layer
    return replace(layer, ops=tuple(replace(op, fp8_norm_input=True) if i in fed else op for i, op in enumerate(ops)))


def norm_fused_model(model: ModelSpec) -> ModelSpec:
    """`model` with the GEMMs whose FP8 input Transformer Engine's norm writes under delayed scaling marked
    (`fp8_norm_input`; module docstring).

    >>> from scalesim.models import get_model
    >>> ops = [op for layer in norm_fused_model(get_model("llama2-7b", seq_len=64)).layers for op in layer.ops]
    >>> sorted({op.name for op in ops if op.fp8_norm_input})
    ['mlp_gate', 'qkv']
    >>> ops = [op for layer in norm_fused_model(get_model("gpt3-1.3b", seq_len=64)).layers for op in layer.ops]
    >>> sorted({op.name for op in ops if op.fp8_norm_input})
    ['mlp_up', 'qkv']
    """
    return replace(model, layers=tuple(_fused_layer(layer) for layer in model.layers))


def norm_outputs_asked(layer: LayerSpec, shapes: list[tuple]) -> LayerSpec:
    """`layer` with the norm fusion undone for the LayerNormLinear GEMMs whose norm output an adapter reads
    (`shapes`: costs/adapters.py adapter_shapes): NeMo's LoRA asks for it in 16 bits, and TE casts it in a kernel
    of its own (module docstring; costs/te_ops.py takes that cast off again under the op fuser)."""
    asked = {name for shape in shapes for name in ASKED_BY.get(ADAPTER_INPUT.get(shape[0], ""), ())}
    if not any(op.fp8_norm_input and op.name in asked for op in layer.ops):
        return layer
    return replace(layer, ops=tuple(replace(op, fp8_norm_input=False) if op.fp8_norm_input and op.name in asked
                                    else op for op in layer.ops))
