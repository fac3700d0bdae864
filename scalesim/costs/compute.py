"""How long a layer's forward and backward take on one GPU: a per-op roofline.

Each op takes max(FLOP / achieved peak, bytes / achieved memory bandwidth)
(Williams, Waterman & Patterson 2009, "Roofline"), plus a fixed per-kernel
cost. The achieved peak is the GPU's catalog `gemm_efficiency` (large-GEMM
measurements, cited there) scaled by how well the GEMM's shape fills the GPU
(tile and wave quantization), and `memory_bw_efficiency` for memory traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# Bytes per activation/weight element as the kernels read them. FP8 training
# (Transformer Engine) keeps activations between ops in 16-bit, so 2.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}

MATMUL_KINDS = ("gemm", "conv", "attention")
ATTENTION = ("flash", "naive")

# GPU-side cost of one kernel beyond its roofline time (launch and tail):
# ~2-4 us per kernel is typical of eager PyTorch on recent GPUs (NVIDIA Nsight
# traces; the PyTorch performance tuning guide's advice to fuse small ops).
KERNEL_OVERHEAD_S = 3e-6

# Backward costs relative to forward: a GEMM's backward computes the input
# gradient and the weight gradient, two GEMMs of the forward's size (Narayanan
# et al. 2021, SC21, sec. 5.1: "backward pass is 2x forward"). Memory-bound ops
# read the output gradient and the saved input and write the input gradient.
BACKWARD_FLOP_RATIO = 2.0
BACKWARD_BYTES_RATIO = 2.0

# Thread-block tiles cuBLAS chooses from, with the fraction of the large-tile
# rate each reaches. Larger tiles reuse more data per SM; small tiles are used
# for small or skinny GEMMs. NVIDIA, "Matrix Multiplication Background User's
# Guide" (tile and wave quantization; its Fig. 7 shows 64x64 tiles well below
# 256x128). The relative rates of the smaller tiles are estimates.
TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (64, 128, 0.85), (64, 64, 0.7))

# Fraction of the dense peak flash attention (forward + backward) reaches.
# Dao 2023, FlashAttention-2: 50-73% of peak on A100 (midpoint 0.62; Ada runs
# the same kernels). Shah et al. 2024, FlashAttention-3: FA2 reaches 35% on
# H100 and FA3 75%; frameworks use either (PyTorch SDPA: FA2; Transformer
# Engine/cuDNN: FA3-class), so Hopper and Blackwell take 0.5, an estimate.
FLASH_ATTENTION_EFFICIENCY = {"ampere": 0.62, "ada": 0.62, "hopper": 0.5, "blackwell": 0.5}

# Naive (unfused) attention writes the scores of QK^T, scales and masks them
# (read + write), takes the softmax (read + write), applies dropout (read +
# write) and reads the probabilities in the AV product: 8 passes over the
# heads x s x s scores per sample in the forward (as in HF BERT/GPT-2 eager
# attention).
NAIVE_SCORE_PASSES = 8


def gemm_shape_efficiency(m: int, n: int, gpu: GpuSpec) -> float:
    """Fraction of the large-GEMM rate an m x n output reaches, from tile and wave quantization.

    The output is cut into tiles; tiles run in waves of one per SM; a partial
    last wave and padded edge tiles waste SM time. The best tile wins.

    >>> from scalesim.hardware import get_gpu
    >>> round(gemm_shape_efficiency(8192, 8192, get_gpu("a100-80gb-sxm")), 3)
    0.998
    >>> gemm_shape_efficiency(512, 512, get_gpu("a100-80gb-sxm")) < 0.5
    True
    """
    if gpu.sms <= 0:
        return 1.0
    best = 0.0
    for tile_m, tile_n, rate in TILES:
        tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
        waves = math.ceil(tiles / gpu.sms)
        best = max(best, rate * (m * n) / (waves * gpu.sms * tile_m * tile_n))
    return min(best, 1.0)


# The catalog's gemm_efficiency is measured on large square GEMMs (8192^3 in
# most of its sources), which already pay that shape's wave quantization; other
# shapes are scaled relative to it.
REFERENCE_GEMM = 8192


def relative_shape_efficiency(m: int, n: int, gpu: GpuSpec) -> float:
    """Shape efficiency relative to the catalog's reference GEMM, at most 1."""
    return min(1.0, gemm_shape_efficiency(m, n, gpu) / gemm_shape_efficiency(REFERENCE_GEMM, REFERENCE_GEMM, gpu))


def _memory_s(bytes_moved: float, gpu: GpuSpec) -> float:
    return bytes_moved / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)


def attention_time_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int, attention: str) -> float:
    """Forward time of the attention core (QK^T, softmax, AV) for a micro-batch.

    FP8 recipes keep attention in 16-bit (Transformer Engine), so fp8 uses the bf16 peak.
    """
    peak = gpu.peak_flop_per_s("bf16" if precision == "fp8" else precision)
    ebytes = ELEMENT_BYTES[precision]
    flop = op.flop * batch
    io_s = _memory_s(op.elements_moved * batch * ebytes, gpu)
    if attention == "flash":
        executed = flop / 2 if op.causal else flop     # flash skips fully masked blocks
        return max(executed / (peak * FLASH_ATTENTION_EFFICIENCY.get(gpu.arch, 0.5)), io_s) + KERNEL_OVERHEAD_S
    # Naive: two batched GEMMs at the GEMM rate, plus passes over the score matrices.
    compute_s = flop / (peak * gpu.gemm_efficiency)
    scores_s = _memory_s(NAIVE_SCORE_PASSES * op.score_elements * batch * ebytes, gpu)
    return compute_s + scores_s + io_s + 5 * KERNEL_OVERHEAD_S


def op_time_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int, attention: str = "flash") -> float:
    """Forward time of one op for a micro-batch of `batch` samples."""
    if op.kind == "attention":
        return attention_time_s(op, gpu, precision, batch, attention)
    ebytes = ELEMENT_BYTES[precision]
    flop = op.flop * batch
    if op.gemm_mnk is not None:
        m, n, k = op.gemm_mnk
        m *= batch
        bytes_moved = (m * k + k * n + m * n) * ebytes
    else:
        bytes_moved = op.elements_moved * batch * ebytes
    cast_s = 0.0
    if op.kind in MATMUL_KINDS:
        shape = relative_shape_efficiency(m, n, gpu) if op.gemm_mnk is not None else 1.0
        compute_s = flop / (gpu.peak_flop_per_s(precision) * gpu.gemm_efficiency_for(precision) * shape)
        if precision == "fp8" and op.gemm_mnk is not None:
            # Transformer Engine casts the 16-bit input to FP8 before the GEMM:
            # read 2 bytes, write 1 per input element (TE FP8 primer).
            cast_s = _memory_s(3 * m * k, gpu) + KERNEL_OVERHEAD_S
    else:
        compute_s = flop / gpu.fp32_flop_per_s
    return max(compute_s, _memory_s(bytes_moved, gpu)) + cast_s + KERNEL_OVERHEAD_S


@dataclass(frozen=True, slots=True)
class LayerTime:
    forward_s: float
    backward_s: float
    recompute_s: float      # extra forward work in backward under activation checkpointing
    forward_flop: float     # executed, per micro-batch
    matmul_forward_s: float


def layer_time(layer: LayerSpec, gpu: GpuSpec, precision: str, batch: int,
               checkpointing: str = "none", attention: str = "flash") -> LayerTime:
    """Forward, backward and recompute time of one layer for a micro-batch.

    Full checkpointing re-runs the whole forward of the layer in backward;
    selective re-runs only the attention core (Korthikanti et al. 2022, sec. 5).
    """
    fwd = 0.0
    bwd = 0.0
    attention_s = 0.0
    matmul = 0.0
    for op in layer.ops:
        t = op_time_s(op, gpu, precision, batch, attention)
        fwd += t
        if op.kind in MATMUL_KINDS:
            matmul += t
            bwd += (t - KERNEL_OVERHEAD_S) * BACKWARD_FLOP_RATIO + 2 * KERNEL_OVERHEAD_S
        else:
            bwd += (t - KERNEL_OVERHEAD_S) * BACKWARD_BYTES_RATIO + KERNEL_OVERHEAD_S
        if op.kind == "attention":
            attention_s += t
    recompute = {"none": 0.0, "selective": attention_s, "full": fwd}[checkpointing]
    return LayerTime(fwd, bwd, recompute, layer.forward_flop * batch, matmul)


def optimizer_time_s(params: float, gpu: GpuSpec, precision: str, optimizer: str = "adamw") -> float:
    """One optimizer update over `params` parameters: memory-bound streaming.

    Mixed-precision Adam reads and writes the fp32 master weight and both fp32
    moments (24 B), reads the 16-bit gradient (2 B) and writes the 16-bit
    weight (2 B): 28 B/param; fp32 training: weight, m, v read+write plus the
    gradient (28 B). SGD with momentum: weight and momentum read+write plus
    the gradient. (Counting follows Rajbhandari et al. 2020, ZeRO, sec. 3.1.)
    """
    if optimizer == "sgd":
        per_param = 20.0 if ELEMENT_BYTES[precision] == 4 else 12.0
    else:
        per_param = 28.0
    return _memory_s(params * per_param, gpu) + KERNEL_OVERHEAD_S


def model_forward_time_s(model: ModelSpec, gpu: GpuSpec, precision: str, batch: int) -> float:
    return sum(layer_time(layer, gpu, precision, batch).forward_s for layer in model.layers)
