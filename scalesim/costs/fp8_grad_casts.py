"""The FP8 casts a Transformer Engine linear runs in backward (scalesim's default `fp8` recipe): the bytes they
move, for one sample. Pure functions; compute.py prices them at the streaming rate.

A TE Linear / LayerNormLinear with Float8Quantizer (delayed or current tensorwise scaling) casts its input in
forward (compute.py fp8_cast_s: read 2 bytes, write 1 an element of the m x k input) and keeps that FP8
tensor for backward: it is not cast again. In backward it casts its output gradient, m x n
(transformer_engine/pytorch/module/linear.py @release_v2.8 40c69e75, backward: `quantizer.set_usage(rowwise=
True, columnwise=True)` then `grad_output_preprocess`, module/base.py: `tex.bgrad_quantize` or `quantizer
(grad_output)`): read 2 bytes, write 1 for the data-gradient GEMM. The amax is computed in the cast kernel
itself. So the gradient cast is of the GEMM's output, not its input: for a SwiGLU fc1 (n = 2 x FFN) 7x the
elements of its input at Llama 2 70B's 8,192 / 28,672, and for fc2 (n = hidden) 3.5x fewer.

The weight-gradient GEMM reads both the input and the gradient in the other layout. Where FP8 GEMMs take only
the TN layout (before Blackwell: transformer_engine/pytorch/utils.py is_non_tn_fp8_gemm_supported, compute
capability 10.x, 11.x or 13+: not the sm_120 parts), the quantizer writes a transposed copy too (csrc/quantizer.cpp
`with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()`): one more byte an element of
the input (written by the forward cast, a fused cast + transpose, counted here with the backward it is for)
and of the gradient. A tensor cast on its sequence-parallel shard and all-gathered in FP8 (the input of a
column-parallel GEMM, `share` < 1, parallel/sharding.py; the gradient of a row-parallel one) cannot carry
the transpose through the gather ("All-gather is not supported with FP8 column-wise data", linear.py):
the gathered tensor is transposed on its own (distributed.py:982 `_all_gather_fp8`: `out._create_transpose()`,
read 1 and write 1 an element of the whole tensor). Without a weight gradient (frozen base weights, LoRA)
neither copy is made (`columnwise=False` when not `requires_wgrad`; `backward_needs_input` is False).

MXFP8 (`fp8_recipe: transformer-engine-mxfp8`, TE's MXFP8BlockScaling: a scale per 32 elements along the row
for the rowwise copy, along the column for the columnwise one) is not a transpose: the columnwise copy is
quantized from the 16-bit tensor with scales of its own, written by the same kernel on any GPU (csrc/quantizer.cpp
:934 `if (columnwise_usage)` allocates it, no architecture test), and it is all-gathered with the rowwise one
(MXFP8Quantizer keeps the base `supports_only_rowwise_all_gather` False, tensor/quantized_tensor.py:263), so
a gathered tensor needs no transpose of its own: one byte an element of the shard. Each copy has its scales,
1 byte (E8M0) per 32 elements (MX_SCALE_BYTES, written by the cast), and before every GEMM TE rearranges both
operands' scales into the layout cuBLAS reads (transformer_engine/pytorch/csrc/extensions/gemm.cpp:233-236
`swizzle_scaling_factors(A_tensor, transa)`, `(B_tensor, !transb)`, csrc/util.cpp:11-20: a kernel for MXFP8,
none for tensorwise scaling; grouped GEMMs one per operand list, gemm.cpp:480-481): two kernels a GEMM
(MX_SWIZZLES), forward and each backward GEMM, counted with the GEMM that casts the input (`cast_share` > 0).

torchao's recipe casts as ops of its own (costs/float8_casts.py) and sets both shares to 0.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.fp8_norm_fusion import NORM_WRITE_SAVED
from scalesim.models.spec import ModelSpec, OpSpec, with_each_op

CAST_BYTES = 3.0              # read 2 (bf16/fp16), write 1 (FP8), per element
TRANSPOSED_COPY_BYTES = 1.0   # the columnwise copy a fused cast + transpose writes beside the rowwise one
GATHERED_TRANSPOSE_BYTES = 2.0  # an FP8 transpose of an all-gathered FP8 tensor: read 1, write 1
MX_SCALE_BYTES = 2.0 / 32       # MXFP8: an E8M0 scale per 32 elements, for each of the two copies
MX_SWIZZLES = 2                 # MXFP8: scale-swizzle kernels before each GEMM, one per operand
# FP8 GEMMs in any layout (TE is_non_tn_fp8_gemm_supported: sm_100..sm_11x and sm_130+): the datacenter Blackwell
# and Rubin parts; not the sm_120/121 ones (RTX 5090, RTX PRO 6000, GB10), nor Hopper, Ada or the AMD parts
TN_ONLY_BLACKWELL = ("rtx5090", "rtx-pro-6000", "gb10")


def any_layout_fp8(gpu) -> bool:
    """Whether `gpu`'s FP8 GEMMs take any layout (no transposed copies for the weight gradient).

    >>> from scalesim.hardware import get_gpu
    >>> [any_layout_fp8(get_gpu(g)) for g in ("gb200", "b300", "rtx5090", "h100-sxm", "mi300x")]
    [True, True, False, False, False]
    """
    return gpu.arch == "blackwell" and gpu.name not in TN_ONLY_BLACKWELL


def mxfp8_runs(gpu) -> bool:
    """Whether Transformer Engine runs MXFP8 on `gpu`: compute capability 10.x-11.x (transformer_engine/pytorch/
    quantization.py `_compute_mxfp8_support`: "Device compute capability 10.0 or higher required", and
    "not supported on 12.0+ architectures yet": the any-layout parts above), or gfx950 in ROCm's TE (CDNA 4).

    >>> from scalesim.hardware import get_gpu
    >>> [mxfp8_runs(get_gpu(g)) for g in ("gb200", "mi355x", "rtx5090", "h100-sxm", "mi300x")]
    [True, True, False, False, False]
    """
    return any_layout_fp8(gpu) or gpu.arch == "cdna4"


def _transposed(elements: float, share: float, both_layouts: bool, own_kernel: bool = False) -> float:
    if share <= 0:
        return 0.0
    if (share >= 1 and not own_kernel) or both_layouts:
        return elements * share * TRANSPOSED_COPY_BYTES
    return elements * GATHERED_TRANSPOSE_BYTES


def backward_cast_bytes(op: OpSpec, any_layout: bool, weight_gradient: bool = True) -> float:
    """Bytes one sample's backward FP8 casts of GEMM `op` move (module docstring): its output gradient cast
    (3 bytes an element of m x n, on the share the GEMM casts) and, with a weight gradient on a GPU whose FP8
    GEMMs are TN-only (or in MXFP8 on any), the columnwise copies of the gradient and of the input.

    >>> op = OpSpec("mlp_down", "gemm", 2.0 * 4 * 8 * 16, 0.0, gemm_mnk=(4, 8, 16))
    >>> backward_cast_bytes(op, True), backward_cast_bytes(op, False), backward_cast_bytes(op, False, False)
    (96.0, 192.0, 96.0)
    """
    if op.gemm_mnk is None:
        return 0.0
    m, n, k = op.gemm_mnk
    both = op.fp8_both_layouts
    moved = (CAST_BYTES + (MX_SCALE_BYTES if both else 0.0)) * m * n * op.grad_cast_share
    if weight_gradient and (both or not any_layout):
        # an input a fused norm wrote in FP8 is transposed by a kernel of its own (costs/fp8_norm_fusion.py)
        moved += (_transposed(m * n, op.grad_cast_share, both)
                  + _transposed(m * k, op.cast_share, both, op.fp8_norm_input))
    return moved * op.groups


def forward_cast(op: OpSpec) -> tuple[float, int]:
    """(bytes per sample, kernels) of GEMM `op`'s forward FP8 cast: a kernel reading 2 and writing 1 byte an
    element of its m x k input on `cast_share`; in MXFP8 also both copies' scales and the two scale swizzles before
    the forward GEMM (module docstring); where TE's norm writes it (`fp8_norm_input`, costs/fp8_norm_fusion.py), no
    kernel and 1 byte an element less written by the norm (negative bytes).

    >>> op = OpSpec("qkv", "gemm", 2.0 * 4 * 8 * 16, 0.0, gemm_mnk=(4, 8, 16))
    >>> forward_cast(op), forward_cast(replace(op, fp8_both_layouts=True))
    ((192.0, 1), (196.0, 3))
    >>> forward_cast(replace(op, fp8_norm_input=True))
    (-64.0, 0)
    """
    m, _, k = op.gemm_mnk
    elements = m * k * op.groups * op.cast_share
    if op.fp8_both_layouts:
        return (CAST_BYTES + MX_SCALE_BYTES) * elements, 1 + MX_SWIZZLES
    return (-NORM_WRITE_SAVED * elements, 0) if op.fp8_norm_input else (CAST_BYTES * elements, 1)


def backward_cast_kernels(op: OpSpec, weight_gradient: bool = True) -> int:
    """Kernels of GEMM `op`'s backward FP8 casts: its gradient's cast, and in MXFP8 the scale swizzles of the
    data-gradient GEMM and, with a weight gradient, of the weight-gradient one (module docstring).

    >>> op = OpSpec("mlp_down", "gemm", 2.0 * 4 * 8 * 16, 0.0, gemm_mnk=(4, 8, 16))
    >>> backward_cast_kernels(op), backward_cast_kernels(replace(op, fp8_both_layouts=True))
    (1, 5)
    """
    if not op.fp8_both_layouts or op.cast_share <= 0:
        return 1
    return 1 + MX_SWIZZLES * (2 if weight_gradient else 1)


def mxfp8_model(model: ModelSpec) -> ModelSpec:
    """`model` with every GEMM that casts to FP8 casting as MXFP8 does (module docstring).

    >>> from scalesim.models import get_model
    >>> ops = [op for layer in mxfp8_model(get_model("llama2-7b", seq_len=64)).layers for op in layer.ops]
    >>> sorted({op.name for op in ops if op.fp8_both_layouts})
    ['attn_out', 'mlp_down', 'mlp_gate', 'mlp_up', 'qkv']
    """
    def mx(op: OpSpec) -> OpSpec:
        casts = op.gemm_mnk is not None and (op.cast_share > 0 or op.grad_cast_share > 0)
        return replace(op, fp8_both_layouts=True) if casts else op
    return with_each_op(model, mx)
