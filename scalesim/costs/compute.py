"""How long a layer's forward and backward take on one GPU: a per-op roofline.

Each op takes max(FLOP / achieved peak, bytes / achieved memory bandwidth)
(Williams, Waterman & Patterson 2009, "Roofline"), plus a fixed per-kernel
cost. Achieved fractions are the GPU's catalog `gemm_efficiency` and
`memory_bw_efficiency`, each with its source in the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# Bytes per activation/weight element as the kernels read them. FP8 training
# (Transformer Engine) keeps activations between ops in 16-bit, so 2.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}

MATMUL_KINDS = ("gemm", "conv", "attention")

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


def op_time_s(op: OpSpec, gpu: GpuSpec, precision: str, batch: int) -> float:
    """Forward time of one op for a micro-batch of `batch` samples."""
    ebytes = ELEMENT_BYTES[precision]
    flop = op.flop * batch
    if op.gemm_mnk is not None:
        m, n, k = op.gemm_mnk
        m *= batch
        bytes_moved = (m * k + k * n + m * n) * ebytes
    else:
        bytes_moved = op.elements_moved * batch * ebytes
    if op.kind in MATMUL_KINDS:
        compute_s = flop / (gpu.peak_flop_per_s(precision) * gpu.gemm_efficiency)
    else:
        compute_s = flop / gpu.fp32_flop_per_s
    memory_s = bytes_moved / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)
    return max(compute_s, memory_s) + KERNEL_OVERHEAD_S


@dataclass(frozen=True, slots=True)
class LayerTime:
    forward_s: float
    backward_s: float
    recompute_s: float      # extra forward work in backward under activation checkpointing
    forward_flop: float     # executed, per micro-batch
    matmul_forward_s: float


def layer_time(layer: LayerSpec, gpu: GpuSpec, precision: str, batch: int,
               checkpointing: str = "none") -> LayerTime:
    """Forward, backward and recompute time of one layer for a micro-batch.

    Full checkpointing re-runs the whole forward of the layer in backward;
    selective re-runs only the attention core (Korthikanti et al. 2022, sec. 5).
    """
    fwd = 0.0
    bwd = 0.0
    attention = 0.0
    matmul = 0.0
    for op in layer.ops:
        t = op_time_s(op, gpu, precision, batch)
        fwd += t
        if op.kind in MATMUL_KINDS:
            matmul += t
            bwd += (t - KERNEL_OVERHEAD_S) * BACKWARD_FLOP_RATIO + 2 * KERNEL_OVERHEAD_S
        else:
            bwd += (t - KERNEL_OVERHEAD_S) * BACKWARD_BYTES_RATIO + KERNEL_OVERHEAD_S
        if op.kind == "attention":
            attention += t
    recompute = {"none": 0.0, "selective": attention, "full": fwd}[checkpointing]
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
    return params * per_param / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency) + KERNEL_OVERHEAD_S


def model_forward_time_s(model: ModelSpec, gpu: GpuSpec, precision: str, batch: int) -> float:
    return sum(layer_time(layer, gpu, precision, batch).forward_s for layer in model.layers)
