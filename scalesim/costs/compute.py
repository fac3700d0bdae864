"""How long a layer's forward and backward take on one GPU: a per-op roofline.

Each op takes max(FLOP / achieved peak, bytes / achieved memory bandwidth) (Williams, Waterman &
Patterson 2009, "Roofline"), plus a fixed per-kernel cost. The achieved peak is the GPU's catalog
`gemm_efficiency` (large-GEMM measurements, cited there) scaled by how well the GEMM's shape fills
the GPU (tile and wave quantization), and `memory_bw_efficiency` for GEMM operand traffic.
Memory-bound framework kernels (everything but GEMMs and convs) move bytes at the lower of that DRAM
rate and what the SMs can issue (`streaming_bw_bytes_per_s`). Convolutions in NCHW 16-bit training
also pay cuDNN's layout conversions (`layout_conversion_s`); materialised scores cost passes (costs/score_ops.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalesim.hardware import GpuSpec
from scalesim.costs.flash import (FLASH_KERNEL_EFFICIENCY, FLASH_KINDS, backward_over_forward,  # noqa: F401
                                  causal_rate, flash_efficiency)
from scalesim.costs.part_attention import attention_speedup
from scalesim.costs.context_chunks import ring_time_factor, windowed_work
from scalesim.costs.fp8_current_scaling import AMAX_KERNELS, amax_bytes
from scalesim.costs.fp8_grad_casts import any_layout_fp8, backward_cast_bytes, backward_cast_kernels, forward_cast
from scalesim.costs.gemm_depth import backward_gemms, depth_factor
from scalesim.costs.head_dims import head_dim_factor
from scalesim.costs.projections import gemm_parts
from scalesim.costs.recompute import SELECTIVE_OP, module_recompute_s, recomputed_time_s
from scalesim.costs.score_ops import fused_score_passes, score_passes
from scalesim.costs.te_unfused import extra_bytes as te_unfused_extra
from scalesim.models.spec import LayerSpec, OpSpec

# Bytes per activation/weight element as the kernels read them. FP8 training
# (Transformer Engine) keeps activations between ops in 16-bit, so 2.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}

MATMUL_KINDS = ("gemm", "conv", "attention")
ATTENTION = ("flash", "flash2", "flash3", "triton", "naive", "fused", "te-unfused")
MEMORY_FORMATS = ("nhwc", "nchw")

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


# Activation memory format of convolutions. Tensor-core convolution kernels
# work on NHWC (channels-last) tensors; PyTorch's default layout is NCHW
# ("contiguous"), and in 16-bit cuDNN then transposes each convolution's
# input to NHWC and its output back (the nchwToNhwcKernel / nhwc2nchw kernels
# of cuDNN traces; cuDNN Developer Guide, "Tensor Layouts"; MosaicML Composer
# "Channels Last" method card; PyTorch "Channels Last Memory Format" tutorial).
# Counted per convolution and step: one conversion of its input and one of its
# output in each of forward, data-gradient (the output gradient in, the input
# gradient back) and weight-gradient (input and output gradient again) passes,
# each a read and a write: forward 2 passes over input + output, backward 4.
# Check against a same-source measurement: timm's benchmark CSVs for RTX 3090,
# PyTorch 1.12, AMP, ResNet-50 training, 1218 img/s NHWC vs 826 img/s NCHW
# (huggingface/pytorch-image-models results/benchmark-train-amp-{nhwc,nchw}-
# pt112-cu113-rtx3090.csv), a 1.47x penalty; this count gives 1.38x on that GPU.
# FP32/TF32 convolutions have native NCHW kernels and pay nothing here.
LAYOUT_CONVERTED_PRECISIONS = ("fp16", "bf16", "fp8")
LAYOUT_PASSES_FORWARD = 2          # read + write of the input and of the output, once each

# Memory-bound framework kernels (element-wise, normalisation, softmax, dropout,
# layout conversions, multi-tensor optimizer updates) do not all reach the DRAM
# bandwidth a copy kernel does: each byte also costs SM work (address and type
# conversion, reductions, random numbers) and an SM keeps only so many loads in
# flight. Their rate is capped at STREAM_BYTES_PER_SM_CYCLE per SM per clock, an
# SM-side roof beside the DRAM roof ("instruction roofline", Ding & Williams
# 2019). Microbenchmarks bracket it: vectorized PyTorch element-wise ops on 2^28
# 16-bit elements move 10-11.6 B/SM/clock on H100 (sin, gelu, relu, pytorch/pytorch
# #141959, #145746) but are DRAM-bound there (relu 2.9 TB/s = a copy kernel's 2.82-2.90,
# vllm-project/vllm#48110, Azure ND H100 v5 BabelStream), so they bound the SM roof from
# below; PyTorch's type-converting copy (AMP's casts, fp32 master weights) took the
# non-vectorized path until 2026 and moved 7.3 B/SM/clock on A100 (bf16 -> fp32, 2^26
# elements, 362 us, pytorch/pytorch#195542) and 7.1 on a power-limited H100 PCIe
# (a 16-bit cast, 2^31 elements, 9.1 ms, pytorch/pytorch#137053, at its 1755 MHz boost).
# FITTED, one global value: 8 B/SM/clock reproduces Lambda's ResNet-50 (NCHW)
# and BERT-large SQuAD throughput on A100 80GB SXM and H100 SXM (validation
# cases lambda-{a100-80gb-sxm4,h100-80gb-sxm5}-{resnet50,bert-large-squad},
# +1% to +13% then; A100 wants ~8, H100 ~7). Since Dec 2026 the SQuAD runs are the
# QA model with DLE's eager copies and dropouts (bert-large-qa): +1.5% / -1.4% at 8.0 (A100 -3.6% with its K0, small12).
# GPUs with few SM-clocks per byte of DRAM bandwidth (A100, H100) hit this roof;
# GeForce cards (many fast SMs on GDDR) stay DRAM-bound, needing no such correction.
# Out of sample (Dec 2026, stream9; re-derived in session 12): re-fitted without Lambda,
# jointly with the H100/H200 training clock, on the 20 reference cases of Megatron-LM 2020
# (A100) and NeuSight (H100), it is 8.0 (clock 0.93; 1.8-3.0% median over 7.5-8.25 x
# 0.93-0.95; 7.5 / 0.94 before A100's depth cost), which predicts Lambda's four runs at
# -3.6% to +1.7% (validation/fits.yaml). The cited 10.8 and a 1.0 clock
# instead take the 220 reference cases from 3.9% to 9.4% median error (128 worse, 28 better).
STREAM_BYTES_PER_SM_CYCLE = 8.0



def gemm_shape_efficiency(m: int, n: int, gpu: GpuSpec, groups: int = 1, held_sms: int = 0) -> float:
    """Fraction of the large-GEMM rate an m x n output reaches, from tile and wave quantization.

    The output is cut into tiles; tiles run in waves of one per SM; a partial
    last wave and padded edge tiles waste SM time. The best tile wins.

    >>> from scalesim.hardware import get_gpu
    >>> round(gemm_shape_efficiency(8192, 8192, get_gpu("a100-80gb-sxm")), 3)
    0.998
    >>> gemm_shape_efficiency(512, 512, get_gpu("a100-80gb-sxm")) < 0.5
    True
    """
    return _shape_efficiency(m, n, gpu.sms, compute_sms(gpu, held_sms), groups)


def _shape_efficiency(m: int, n: int, sms: int, free_sms: int | None = None, groups: int = 1) -> float:
    """The tile is the one best on all `sms` (cuBLAS picks its kernel for the whole GPU);
    its tiles then run in waves over the `free_sms` the GPU's other kernels leave.

    A grouped GEMM (`groups` GEMMs of m x n, MoE experts) runs all groups' tiles in one
    launch, each group's rows padded to the tile (DeepGEMM's contiguous layout aligns
    every expert's segment to the M block: github.com/deepseek-ai/DeepGEMM README,
    "Grouped GEMMs (contiguous layout)"; CUTLASS grouped GEMM schedules tiles the same
    way), so few tokens per expert waste the padded rows of their tiles.
    """
    if sms <= 0:
        return 1.0
    free = sms if free_sms is None else free_sms

    def efficiency(tile_m: int, tile_n: int, rate: float, on: int) -> float:
        tiles = groups * math.ceil(m / tile_m) * math.ceil(n / tile_n)
        return rate * (groups * m * n) / (math.ceil(tiles / on) * on * tile_m * tile_n)

    tile = max(TILES, key=lambda t: efficiency(*t, sms))
    return min(efficiency(*tile, free), 1.0)


def compute_sms(gpu: GpuSpec, held_sms: int = 0) -> int:
    """SMs left to compute kernels: all of them, less the `held_sms` that overlapped NCCL kernels'
    blocks hold (the `held_sms` argument of every timing function here; 0: the GPU alone)."""
    return max(gpu.sms - held_sms, 1) if gpu.sms > 0 else 0


def sm_fraction(gpu: GpuSpec, held_sms: int = 0) -> float:
    """Share of the GPU's SMs compute has; its FLOP rate and SM-issued bandwidth scale with it."""
    return compute_sms(gpu, held_sms) / gpu.sms if gpu.sms > 0 else 1.0


# The catalog's gemm_efficiency is measured on large square GEMMs (8192^3 in
# most of its sources), which already pay that shape's wave quantization; other
# shapes are scaled relative to it.
REFERENCE_GEMM = 8192


def relative_shape_efficiency(m: int, n: int, gpu: GpuSpec, groups: int = 1, held_sms: int = 0) -> float:
    """Shape efficiency relative to the catalog's reference GEMM on the whole GPU, at most 1.

    With SMs held by communication the GEMM runs on fewer SMs: fewer tiles per
    wave (a one-wave GEMM can need two; NVIDIA developer forum, "Compute-Communication
    Overlap Causes Severe GEMM Performance Degradation because of Tail Effect": H100,
    132-block GEMM beside a 24-block ncclAllGather, nearly 2x) and that fraction of the
    GPU's FLOP rate.
    """
    reference = _shape_efficiency(REFERENCE_GEMM, REFERENCE_GEMM, gpu.sms)
    return min(1.0, gemm_shape_efficiency(m, n, gpu, groups, held_sms) / reference) * sm_fraction(gpu, held_sms)


def achieved_peak_flop_per_s(gpu: GpuSpec, precision: str) -> float:
    """Large-GEMM rate in a training step: datasheet peak x measured GEMM efficiency
    x the clock the part sustains under training load (`training_clock_fraction`).

    MFU keeps the datasheet peak as its denominator; only predicted times use this.
    """
    return gpu.peak_flop_per_s(precision) * gpu.gemm_efficiency_for(precision) * gpu.training_clock_fraction


def _memory_s(bytes_moved: float, gpu: GpuSpec) -> float:
    return bytes_moved / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)


def streaming_bw_bytes_per_s(gpu: GpuSpec, held_sms: int = 0) -> float:
    """Rate at which framework memory-bound kernels move bytes: the lower of the
    achieved DRAM bandwidth and what the SMs can issue (STREAM_BYTES_PER_SM_CYCLE).

    >>> from scalesim.hardware import get_gpu
    >>> a100, rtx4090 = get_gpu("a100-80gb-sxm"), get_gpu("rtx4090")
    >>> streaming_bw_bytes_per_s(a100) < a100.memory_bw_bytes_per_s * a100.memory_bw_efficiency
    True
    >>> streaming_bw_bytes_per_s(rtx4090) == rtx4090.memory_bw_bytes_per_s * rtx4090.memory_bw_efficiency
    True
    """
    dram = gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency
    if gpu.sms <= 0 or gpu.sm_clock_hz <= 0:
        return dram
    per_clock = gpu.stream_bytes_per_sm_cycle or STREAM_BYTES_PER_SM_CYCLE
    return min(dram, compute_sms(gpu, held_sms) * gpu.sm_clock_hz * gpu.training_clock_fraction * per_clock)


def _stream_s(bytes_moved: float, gpu: GpuSpec, held_sms: int = 0) -> float:
    return bytes_moved / streaming_bw_bytes_per_s(gpu, held_sms)


def fp8_cast_s(op: OpSpec, gpu: GpuSpec, batch: int, held_sms: int = 0) -> float:
    """The cast of an FP8 GEMM's 16-bit input to FP8 before the GEMM, for `batch` samples (0 for ops that are not
    GEMMs): TE reads 2 bytes and writes 1 per input element, on the local shard (op.cast_share) under sequence
    parallelism; MXFP8's scales and swizzles too; none where TE's norm writes FP8 (fp8_grad_casts.py forward_cast)."""
    if op.gemm_mnk is None or op.kind not in MATMUL_KINDS or op.cast_share <= 0:
        return 0.0
    moved, kernels = forward_cast(op)
    amax = amax_bytes(op, False) * batch        # current scaling: the amax pass first (costs/fp8_current_scaling.py)
    return (_stream_s(moved * batch + amax, gpu, held_sms) + kernels * KERNEL_OVERHEAD_S
            + (AMAX_KERNELS * KERNEL_OVERHEAD_S if amax else 0.0))


def fp8_grad_cast_s(op: OpSpec, gpu: GpuSpec, batch: int, held_sms: int = 0, weight_gradient: bool = True) -> float:
    """The backward FP8 casts of a GEMM (its output gradient; transposed copies on TN-only GPUs), for `batch`
    samples: costs/fp8_grad_casts.py. 0 for ops that are not GEMMs."""
    if op.gemm_mnk is None or op.kind not in MATMUL_KINDS or op.grad_cast_share <= 0:
        return 0.0
    moved = backward_cast_bytes(op, any_layout_fp8(gpu), weight_gradient) * batch
    amax = amax_bytes(op, True) * batch         # current scaling: the amax pass first (costs/fp8_current_scaling.py)
    return (_stream_s(moved + amax, gpu, held_sms) + backward_cast_kernels(op, weight_gradient) * KERNEL_OVERHEAD_S
            + (AMAX_KERNELS * KERNEL_OVERHEAD_S if amax else 0.0))


def attention_time_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int, attention: str,
                     backward: bool = False, held_sms: int = 0) -> float:
    """Forward (or backward) time of the attention core (QK^T, softmax, AV) for a micro-batch.

    Flash attention skips fully masked blocks (at its measured causal rate; outside a sliding window,
    costs/context_chunks.py windowed_work), takes 2.5x its forward FLOP in backward at its
    measured backward rate (costs/flash.py) and runs heads
    other than 128/128 at their measured speed (costs/head_dims.py). Materialised scores (naive,
    fused, te-unfused: fused plus Transformer Engine's per-call mask, output copy and gradient scaling,
    costs/te_unfused.py): two batched GEMMs at the GEMM rate (four in backward) plus the passes over
    the scores (SCORE_PASSES, costs/score_ops.py). FP8 recipes keep attention in 16-bit (Transformer Engine): fp8 uses the bf16 peak,
    unless the op runs FP8 attention (`op.fp8`): then its flash forward runs faster by cuDNN's
    measured FP8 speed-up, its backward too where one is published, and at a part's own rate (costs/part_attention.py).
    """
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, not {attention!r}")
    peak = (gpu.peak_flop_per_s("bf16" if precision == "fp8" else precision) * gpu.training_clock_fraction
            * sm_fraction(gpu, held_sms))
    ebytes = ELEMENT_BYTES[precision]
    flop = op.flop * batch
    io_s = _memory_s(op.elements_moved * batch * ebytes, gpu)
    work = BACKWARD_FLOP_RATIO if backward else 1.0
    if attention in FLASH_KINDS:
        work = backward_over_forward(gpu.arch, attention) if backward else 1.0
        executed = flop / 2 / causal_rate(gpu.arch, op.seq, attention) if op.causal else flop
        # the kernel's rate at the length it runs, per context-parallel ring step (costs/context_chunks.py)
        executed *= ring_time_factor(gpu.arch, op.seq, op.causal, op.ring_steps, backward, attention)
        executed, kernels = windowed_work(op, gpu.arch, flop, executed, backward, attention)  # sliding window
        executed /= head_dim_factor(op.head_dims, gpu.arch, backward)
        # FP8 attention at cuDNN's measured rates, a part's own rate, per ring step (costs/part_attention.py)
        executed /= attention_speedup(gpu, op.seq, op.causal, op.fp8, backward, attention, 1 if op.cp_gather else op.ring_steps)
        forward = max(executed / (peak * flash_efficiency(gpu, attention)), io_s)
        return work * forward + (2 if backward else 1) * KERNEL_OVERHEAD_S * kernels
    compute_s = flop / (peak * gpu.gemm_efficiency_for("bf16" if precision == "fp8" else precision))
    passes, kernels = (score_passes(op.score_ops, backward) if attention == "naive"      # costs/score_ops.py
                       else fused_score_passes(op.score_ops, backward))
    scores_s = _stream_s(passes * op.score_elements * batch * ebytes, gpu, held_sms)
    if attention == "te-unfused":      # its per-call mask, output copy and gradient scaling (costs/te_unfused.py)
        moved, extra_kernels = te_unfused_extra(op, batch, ebytes, backward)
        scores_s += _stream_s(moved, gpu, held_sms) + extra_kernels * KERNEL_OVERHEAD_S
    return work * (compute_s + io_s) + scores_s + kernels * KERNEL_OVERHEAD_S


def layout_conversion_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int, memory_format: str,
                        held_sms: int = 0) -> float:
    """Forward time of the NCHW<->NHWC conversions around one conv (0 in NHWC or FP32/TF32).

    >>> from scalesim.hardware import get_gpu
    >>> from scalesim.models.resnet import conv_op
    >>> op, _ = conv_op("conv", 64, 64, 3, 1, 56)
    >>> gpu = get_gpu("a100-80gb-sxm")
    >>> layout_conversion_s(op, gpu, "fp16", 256, "nhwc"), layout_conversion_s(op, gpu, "fp32", 256, "nchw")
    (0.0, 0.0)
    >>> layout_conversion_s(op, gpu, "fp16", 256, "nchw") > 0
    True
    """
    if memory_format not in MEMORY_FORMATS:
        raise ValueError(f"memory_format must be one of {MEMORY_FORMATS}, not {memory_format!r}")
    if op.kind != "conv" or memory_format == "nhwc" or precision not in LAYOUT_CONVERTED_PRECISIONS:
        return 0.0
    _, n, k = op.gemm_mnk
    activations = op.elements_moved - k * n          # input + output elements per sample
    return (_stream_s(LAYOUT_PASSES_FORWARD * activations * batch * ELEMENT_BYTES[precision], gpu, held_sms)
            + 2 * KERNEL_OVERHEAD_S)


def op_time_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int, attention: str = "flash",
              memory_format: str = "nhwc", held_sms: int = 0, depth: int | None = None, tiles=None) -> float:
    """Forward time of one op for a micro-batch of `batch` samples.

    A conv in NCHW 16-bit training also pays its layout conversions (`layout_conversion_s`), serialised with the conv
    itself; a GEMM reduces over `depth` [its k] into an output of `tiles` [its m x n] (a backward GEMM's).
    """
    if op.kind == "attention":
        return attention_time_s(op, gpu, precision, batch, attention, held_sms=held_sms)
    precision = "bf16" if precision == "fp8" and op.fp8_excluded else precision     # a 16-bit GEMM in an FP8 recipe
    if op.parts:            # separate GEMMs on one input, each at its own shape and depth (costs/projections.py)
        return sum(op_time_s(p, gpu, precision, batch, attention, memory_format, held_sms, depth, tiles)
                   for p in gemm_parts(op))
    ebytes = ELEMENT_BYTES[precision]
    flop = op.flop * batch
    if op.kind == "conv":
        # Implicit-GEMM convolution reads each input element from DRAM once (the
        # kernel window's overlapping reads hit on-chip caches), not the k = C*R*S
        # im2col copies its GEMM view suggests (cuDNN Developer Guide, "Convolution
        # Algorithms": IMPLICIT_GEMM forms no im2col matrix in memory).
        m, n, k = op.gemm_mnk
        input_elements = op.elements_moved - k * n - m * n
        m *= batch
        bytes_moved = (input_elements * batch + k * n + m * n) * ebytes
    elif op.gemm_mnk is not None:
        m, n, k = op.gemm_mnk
        m *= batch
        bytes_moved = (m * k + k * n + m * n) * ebytes * op.groups      # grouped: every expert's weights
    else:
        bytes_moved = op.elements_moved * batch * ebytes
    cast_s = 0.0
    if op.kind in MATMUL_KINDS:
        shape = (relative_shape_efficiency(*(tiles or (m, n)), gpu, op.groups, held_sms) * depth_factor(op, gpu, precision, depth)
                 if op.gemm_mnk is not None else sm_fraction(gpu, held_sms))
        compute_s = flop / (achieved_peak_flop_per_s(gpu, precision) * shape)
        if precision == "fp8" and depth is None:        # forward only: backward casts its gradient
            cast_s = fp8_cast_s(op, gpu, batch, held_sms)
    else:
        compute_s = flop / (gpu.fp32_flop_per_s * gpu.training_clock_fraction * sm_fraction(gpu, held_sms))
    layout_s = layout_conversion_s(op, gpu, precision, batch, memory_format, held_sms)
    memory_s = _memory_s(bytes_moved, gpu) if op.kind in MATMUL_KINDS else _stream_s(bytes_moved, gpu, held_sms)
    return max(compute_s, memory_s) + cast_s + layout_s + KERNEL_OVERHEAD_S


@dataclass(frozen=True, slots=True)
class LayerTime:
    forward_s: float
    backward_s: float
    recompute_s: float      # extra forward work in backward under activation checkpointing
    forward_flop: float     # executed, per micro-batch
    matmul_forward_s: float


def layer_time(layer: LayerSpec, gpu: GpuSpec, precision: str, batch: int, checkpointing: str = "none",
               attention: str = "flash", memory_format: str = "nhwc", held_sms: int = 0,
               recompute_modules: tuple[str, ...] = ()) -> LayerTime:
    """Forward, backward and recompute time of one layer for a micro-batch.

    Full checkpointing re-runs the whole forward of the layer in backward;
    selective re-runs only the attention core (Korthikanti et al. 2022, sec. 5), or the ops of
    `recompute_modules` when given (Megatron-Core's --recompute-modules, scalesim/costs/recompute.py);
    selective-op re-runs what torchtitan's per-op policy does not save
    (scalesim/costs/recompute.py).
    A matmul's backward is twice its forward, layout conversions included
    (data- and weight-gradient passes each convert their tensors again). A `backward_only` op
    adds its own time to backward and nothing to forward.
    """
    fwd = bwd = attention_s = matmul = 0.0
    times = []
    for op in layer.ops:
        t = op_time_s(op, gpu, precision, batch, attention, memory_format, held_sms)
        times.append(0.0 if op.backward_only else t)
        if op.backward_only:            # its elements are the backward kernel's own: not doubled
            bwd += t
            continue
        fwd += t
        if op.kind in MATMUL_KINDS:
            matmul += t
        if op.kind == "attention":
            bwd += attention_time_s(op, gpu, precision, batch, attention, backward=True, held_sms=held_sms)
        elif backward_gemms(op, gpu, precision, batch):   # data gradient over n, weight gradient over m
            bwd += sum(op_time_s(p, gpu, precision, batch, attention, memory_format, held_sms, d, tiles)
                       for p in gemm_parts(op) for d, tiles in backward_gemms(p, gpu, precision, batch))
            bwd += fp8_grad_cast_s(op, gpu, batch, held_sms) if precision == "fp8" else 0.0   # costs/fp8_grad_casts.py
        elif op.kind in MATMUL_KINDS:   # twice the forward's GEMM; the FP8 casts its gradient, not its input
            cast = fp8_cast_s(op, gpu, batch, held_sms) if precision == "fp8" else 0.0
            bwd += ((t - cast - KERNEL_OVERHEAD_S) * BACKWARD_FLOP_RATIO + 2 * KERNEL_OVERHEAD_S
                    + (fp8_grad_cast_s(op, gpu, batch, held_sms) if precision == "fp8" else 0.0))
        else:       # memory-bound: twice its forward, or backward kernels of its own (costs/nanotron_kernels.py)
            own = op.backward_elements
            bwd += ((t - KERNEL_OVERHEAD_S) * BACKWARD_BYTES_RATIO if own is None
                    else _stream_s(own * batch * ELEMENT_BYTES[precision], gpu, held_sms)) + KERNEL_OVERHEAD_S
        if op.kind == "attention":
            attention_s += t
    if recompute_modules and checkpointing == "selective":
        attention_s = module_recompute_s(layer, times, recompute_modules)
    recompute = {"none": 0.0, "selective": attention_s, "full": fwd,
                 SELECTIVE_OP: recomputed_time_s(layer, times)}[checkpointing]
    return LayerTime(fwd, bwd, recompute, layer.forward_flop * batch, matmul)
