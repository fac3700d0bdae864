"""Transformer Engine's FP8 current scaling (`fp8_recipe: transformer-engine-current`; TE's Float8CurrentScaling,
what NeMo and NVIDIA's MLPerf configs call `FP8_RECIPE=tensorwise` / `fp8_recipe: tensorwise`): the amax pass.

Delayed scaling (scalesim's default `transformer-engine`) takes each tensor's scale from the amax history of
earlier steps; the cast kernel records this tensor's amax as it casts (fp8_grad_casts.py). Current scaling
needs this very tensor's amax before it can cast (transformer_engine/pytorch/tensor/float8_tensor.py:194
Float8CurrentScalingQuantizer "computed directly by scanning the input high-precision tensor", TE release_v2.8
@40c69e75). Its quantize (csrc/quantizer.cpp:497-536 `quantize_impl`) runs, per tensor:
`nvte_compute_amax_with_config` (a pass that reads the 16-bit tensor: 2 bytes an element, :518), with
`with_amax_reduction` an all-reduce (MAX) of the one-element amax over `amax_reduction_group` (:522-528),
`nvte_compute_scale_from_amax` (one element, :531), then the cast `nvte_quantize_v2` (:535, the 3 bytes an
element fp8_grad_casts.py already counts). So each tensor cast by TE's own quantize is read once more.

Where the producing kernel computes the amax, there is no such pass (`quantize_with_amax`, quantizer.cpp:543,
`compute_amax` false); which producers do is the scenario's `fp8_amax_fused` (AMAX_PRODUCERS):

- `norm`: TE's RMSNorm (LayerNorm) forward writes its 16-bit output with the amax (csrc/extensions/
  normalization.cpp:340-344, :116-120 FUSED_NORM_AMAX_FP8), unless `NVTE_NORM_FWD_USE_CUDNN` is set (cuDNN's norm:
  UNFUSED, then `quantize` with its amax pass, :408, :186). Then the inputs of LayerNormLinear (Megatron-Core's
  TELayerNormColumnParallelLinear linear_qkv and linear_fc1: here `qkv`, `mlp_gate`, `mlp_up`) pay none;
- `activation`: under Transformer Engine's op fuser (Megatron-Core's TEFusedMLP, USE_TE_OPS=True) the SwiGLU is
  TE's (ops/basic/activation.py:104, :138), its forward writing its output with the amax (csrc/extensions/
  activation.cpp:39-40, :69-77 FUSED_ACTIVATION_AMAX_FP8: linear_fc2's input, `mlp_down`) and its backward its
  gradient (:124-125, :159-168: linear_fc1's output gradient, `mlp_gate` / `mlp_up`).

Every other cast goes through `tex.quantize` (csrc/extensions/cast.cpp:71-76) or the quantizer's `__call__` and pays
the pass: linear_proj's input (the attention output), linear_fc2's without the op fuser (Megatron's own fused
SwiGLU), and the output gradients in backward (module/base.py grad_output_preprocess: `quantizer(grad_output)`;
Llama's linears have no bias, so no `bgrad_quantize`). The pass reads the tensor on the share the GEMM casts
(`cast_share`, `grad_cast_share`: the sequence-parallel shard where it is cast before an FP8 all-gather).

Left out: the amax all-reduce over the tensor-parallel group (module/linear.py:1637-1644 and :1654-1661: the
input of a column-parallel and the output gradient of a row-parallel linear under sequence parallelism, 4 a
block and micro-batch, one element each, latency only); the weights' casts (once a step, not a micro-batch,
with FP8 parameter gather); MoE GEMMs are treated as the dense ones by name (experts' inputs pay the pass).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import ModelSpec, OpSpec, with_each_op

AMAX_READ_BYTES = 2.0      # nvte_compute_amax reads the 16-bit tensor once, per element
# Kernels the pass adds before the cast (common/recipe/current_scaling.cu @40c69e75): zero_amax_kernel (:75), the
# amax kernel (:97-107) and compute_scale_from_amax_kernel (:258)
AMAX_KERNELS = 3
AMAX_PRODUCERS = ("norm", "activation")
# GEMMs whose FP8 input a TE norm writes with its amax (LayerNormLinear / LayerNormMLP fc1: FUSED_NORM_AMAX_FP8)
NORM_FED = ("qkv", "mlp_gate", "mlp_up")
# ... whose input TE's SwiGLU writes with its amax, and those whose output gradient its backward writes (TE ops)
ACTIVATION_FED, ACTIVATION_GRAD_FED = ("mlp_down",), ("mlp_gate", "mlp_up")


def amax_bytes(op: OpSpec, gradient: bool) -> float:
    """Bytes one sample's amax pass of GEMM `op` reads before its forward cast (`gradient` False: its m x k input
    on `cast_share`) or its backward one (True: its m x n output gradient on `grad_cast_share`); 0 where the op
    has no such pass (module docstring).

    >>> op = replace(OpSpec("mlp_down", "gemm", 2.0 * 4 * 8 * 16, 0.0, gemm_mnk=(4, 8, 16)), fp8_amax_input=True,
    ...              fp8_amax_grad=True)
    >>> amax_bytes(op, False), amax_bytes(op, True)
    (128.0, 64.0)
    """
    if op.gemm_mnk is None:
        return 0.0
    m, n, k = op.gemm_mnk
    if gradient:
        return AMAX_READ_BYTES * m * n * op.grad_cast_share * op.groups if op.fp8_amax_grad else 0.0
    return AMAX_READ_BYTES * m * k * op.cast_share * op.groups if op.fp8_amax_input else 0.0


def current_scaling_model(model: ModelSpec, amax_fused: tuple[str, ...] = ("norm",)) -> ModelSpec:
    """`model` with every GEMM that casts to FP8 computing its amax in a pass of its own, except where a producer
    in `amax_fused` (AMAX_PRODUCERS) writes it (module docstring).

    >>> from scalesim.models import get_model
    >>> ops = [op for layer in current_scaling_model(get_model("llama2-7b", seq_len=64)).layers for op in layer.ops]
    >>> sorted({op.name for op in ops if op.fp8_amax_input}), sorted({op.name for op in ops if op.fp8_amax_grad})
    (['attn_out', 'mlp_down'], ['attn_out', 'mlp_down', 'mlp_gate', 'mlp_up', 'qkv'])
    """
    if not set(amax_fused) <= set(AMAX_PRODUCERS):
        raise ValueError(f"fp8_amax_fused must be a list of {AMAX_PRODUCERS}, not {amax_fused!r}")
    no_input = (NORM_FED if "norm" in amax_fused else ()) + (ACTIVATION_FED if "activation" in amax_fused else ())
    no_grad = ACTIVATION_GRAD_FED if "activation" in amax_fused else ()

    def cs(op: OpSpec) -> OpSpec:
        if op.gemm_mnk is None:
            return op
        return replace(op, fp8_amax_input=op.cast_share > 0 and op.name not in no_input,
                       fp8_amax_grad=op.grad_cast_share > 0 and op.name not in no_grad)
    return with_each_op(model, cs)
