"""Gradient accumulation across micro-batches when it is a pass of its own.

Megatron-LM sums micro-batch gradients inside the weight-gradient GEMM
(gradient_accumulation_fusion: the GEMM accumulates into the fp32 main_grad),
so summing costs nothing extra; that is scalesim's default (`fused`).
nanotron with `accumulate_grad_in_fp32` lets autograd write each micro-batch's
16-bit gradients, then adds every one into its fp32 buffer, one `add_` per
parameter tensor, after every micro-batch's backward (and, on the last one,
inside DDP's communication hook before the bucket is reduced): nanotron
src/nanotron/optim/gradient_accumulator.py, FP32GradientAccumulator.backward
-> _accumulate_grad (`fp32_grad.add_(half_param.grad)`) and get_fp32_accum_hook,
called per micro-batch by parallel/pipeline_parallel/engine.py, @67c5ebb6.
Each add reads the 16-bit gradient and the fp32 buffer and writes the buffer:
2 + 4 + 4 = 10 bytes per parameter in bf16, memory-bound.
Without either (Megatron-LM of 2021, which has no gradient_accumulation_fusion, with fp16 weights and no
contiguous gradient buffer: megatron/model/distributed.py @6985e58938), autograd's AccumulateGrad adds each
micro-batch's new gradient into param.grad in place, in the gradient's own dtype (torch/csrc/autograd/
functions/accumulate_grad.h, `variable_grad += new_grad`), from the second micro-batch on (the optimizer's
zero_grad sets param.grad to None, so the first micro-batch's gradient is taken as is): `autograd-add`,
3 x 2 = 6 bytes per parameter in fp16.
"""

from __future__ import annotations

from scalesim.costs.compute import ELEMENT_BYTES, KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s
from scalesim.hardware import GpuSpec

MODES = ("fused", "fp32-add", "autograd-add")


def grad_accumulation_bytes_per_param(mode: str, precision: str) -> float:
    """Bytes one micro-batch's accumulation moves per parameter.

    >>> grad_accumulation_bytes_per_param("fp32-add", "bf16"), grad_accumulation_bytes_per_param("fused", "bf16")
    (10.0, 0.0)
    >>> grad_accumulation_bytes_per_param("autograd-add", "fp16")
    6.0
    """
    if mode not in MODES:
        raise ValueError(f"grad_accumulation must be one of {MODES}, not {mode!r}")
    if mode == "autograd-add":
        return 3.0 * ELEMENT_BYTES[precision]
    return 0.0 if mode == "fused" else ELEMENT_BYTES[precision] + 8.0


def grad_accumulation_time_s(params: float, gpu: GpuSpec, precision: str, mode: str,
                             held_sms: int = 0) -> float:
    """One micro-batch's gradients of `params` parameters summed outside the GEMMs (0 when fused).

    >>> from scalesim.hardware import get_gpu
    >>> h100 = get_gpu("h100-sxm")
    >>> grad_accumulation_time_s(1e9, h100, "bf16", "fused")
    0.0
    >>> grad_accumulation_time_s(2e9, h100, "bf16", "fp32-add") > grad_accumulation_time_s(1e9, h100, "bf16", "fp32-add")
    True
    """
    moved = params * grad_accumulation_bytes_per_param(mode, precision)
    if moved <= 0:
        return 0.0
    return moved / streaming_bw_bytes_per_s(gpu, held_sms) + KERNEL_OVERHEAD_S
