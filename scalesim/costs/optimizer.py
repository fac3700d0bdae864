"""The optimizer update's cost: a memory-bound pass over the parameters' state (bytes per parameter by optimizer)."""

from __future__ import annotations

from scalesim.costs.compute import KERNEL_OVERHEAD_S, _stream_s
from scalesim.hardware import GpuSpec


def optimizer_time_s(params: float, gpu: GpuSpec, precision: str, optimizer: str = "adamw",
                     held_sms: int = 0) -> float:
    """One optimizer update over `params` parameters: memory-bound streaming.

    Mixed-precision Adam reads and writes the fp32 master weight and both fp32
    moments (24 B), reads the 16-bit gradient (2 B) and writes the 16-bit
    weight (2 B): 28 B/param; fp32 training: weight, m, v read+write plus the
    gradient (28 B). SGD with momentum: weight and momentum read+write plus
    the gradient, 20 B in either precision (mixed: the fp32 master and momentum
    the memory model keeps, costs/memory.py, 16 B, the 16-bit gradient read and
    weight written, 4 B). (Counting follows Rajbhandari et al. 2020, ZeRO, sec. 3.1.)
    """
    if optimizer == "none":
        return 0.0
    return _stream_s(params * optimizer_bytes_per_param(precision, optimizer), gpu, held_sms) + KERNEL_OVERHEAD_S


def optimizer_bytes_per_param(precision: str, optimizer: str) -> float:
    """Bytes an optimizer update reads and writes per parameter (`optimizer_time_s`), on the GPU
    or, offloaded, from the host's memory."""
    if optimizer == "none":          # forward + backward only: no update runs
        return 0.0
    if optimizer == "sgd":
        return 20.0
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        # 8-bit Adam (Dettmers et al. 2022): moments read and written as 1 byte each (4 B), the
        # weight (or fp32 master) read and written, the gradient read, the 16-bit copy written: 16 B.
        return 16.0
    return 28.0
