"""The optimizer step of Megatron-Core's distributed optimizer split at its gradient-norm sync.

Megatron-Core's MixedPrecisionOptimizer.step (megatron/core/optimizer/optimizer.py; the
DistributedOptimizer inherits it) clips before it updates: `clip_grad_norm` -> clip_grads.py
`get_grad_norm_fp32` runs multi_tensor_l2norm over the rank's shard of fp32 main gradients,
all-reduces the one float over the gradient group and reads it on the host (`total_norm.item()`,
clip_grads.py at the 25.09 release the MLPerf v5.1 recipes check out; the tensor path without the
read came with "Enable CUDA graph for ADAM optimizer", 3d87bfc1, 2026). Megatron skips all of this
at clip_grad 0 (`if self.config.clip_grad > 0.0`); its default, and NeMo's, is 1.0. From that read on,
the GPU queue is empty and every kernel of the update waits for the Python that issues it: the clip
scale, Adam over the shard, the copy of the updated master weights into the model's (with FP8
parameters Transformer Engine's cast_master_weights_to_fp8, a Python loop over every FP8 weight:
transformer_engine/pytorch/tensor/utils.py _cast_master_weights_to_fp8_current_scaling), and the
zeroing of the gradient buffers before the next step. Megatron-Bridge issue #1793 ("Lower CPU
overhead of optimizer.step", per-parameter quantization, gradient zeroing and optimizer calls, and
tensor slicing) names this cost; Megatron-LM PR #7446 measured graphing the optimizer on a small proxy
model (MFSDP v2, H100): 39.45 -> 33.07 ms a step.

Other frameworks' clipping does not read the norm on the host: torch.nn.utils.clip_grad_norm_ (DDP,
FSDP, torchtitan) multiplies by a clamped device tensor unless error_if_nonfinite=True; nanotron's
clip_grad_norm likewise (nanotron/optim/clip_grads.py). DeepSpeed's ZeRO-1/2 (stage_1_and_2.py) read it in
older releases (`total_norm_cuda[0].item()` in get_grad_norm_direct) and keep it a device tensor in newer
ones (scaled_global_norm: torch.norm of the stacked group norms): a DeepSpeed scenario should say which.
Left out (review14b): the norm's all-reduce spans the whole world with the distributed optimizer
(optimizer.py get_grad_stats_parallel_group; the model-parallel group without it), here dp x cp only, so
pipeline stages do not wait for each other's norm (dgxc 405B FP8 on 128 GB200, pp 8: the step would end
<= 0.8 ms of 4.50 s later); Megatron's non-distributed optimizer (zero 0) reads the norm too, but zero 0
is also torch DDP, so its default stays false.
MoE models: the routed experts' parameters are a buffer of their own, sharded over the expert-data-parallel
group by a DistributedOptimizer of their own chained after the dense one (each clips, updates and casts its
shard: the counts below apply to each), their tensors one per local expert and linear as Transformer Engine's
GroupedLinear registers them (weight0.., costs/coalesced.py expert_tensors; parallel/optimizer_tail.py).
No per-tensor figure is measured for an expert's tensor: it is counted at the same ops as any other tensor.
Pure functions; parallel/optimizer_tail.py builds the tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from scalesim.costs.compute import KERNEL_OVERHEAD_S, _stream_s
from scalesim.costs.optimizer import optimizer_time_s
from scalesim.hardware import GpuSpec

# multi_tensor_l2norm reads each fp32 main gradient of the shard once.
GRAD_NORM_BYTES_PER_PARAM = 4.0

# The distributed optimizer's other passes over its shard, each memory-bound at costs/compute.py's streaming
# rate (bytes read + written per shard parameter, from the code; no fitted factor):
# before the norm, prepare_grads (distrib_optimizer.py _copy_model_grads_to_main_grads) gives each shard its
# fp32 gradient with `shard_model_grad.float()`: the 16-bit reduced gradient read, its fp32 copy written
# (none when the gradients are reduced in fp32: .float() returns the tensor itself);
FP32_BYTES = 4.0
# after Adam, _copy_main_params_to_model_params copies a 16-bit parameter's shard from its fp32 main
# (`shard_model_param.data.copy_(shard_main_param)`): 4 bytes read, 2 written;
PARAM_COPY_BYTES_PER_PARAM = 6.0
# and an FP8 weight's (fp8_param_gather) goes through TE cast_master_weights_to_fp8, current scaling
# (transformer_engine/pytorch/tensor/utils.py): `master_weight.to(model_weight.dtype)` (4 read, 2 written),
# tex.compute_amax over that bf16 copy (2), update_quantized into the FP8 shard (2 read, 1 written).
FP8_CAST_BYTES_PER_PARAM = 6.0 + 2.0 + 3.0
# Not counted: the clip's multi_tensor_scale (4 + 4 bytes) runs only when the norm exceeds clip_grad
# (clip_grads.py `if clip_coeff < 1.0`), which the step's shape does not tell.

# Host dispatches after the norm's read, counted from the code (each a torch op, a Transformer
# Engine extension call or a small Python block of comparable weight, at costs/host.py's
# DISPATCH_S_PER_OP; the Float8Tensor views go through its Python __torch_dispatch__, counted as
# one op each for want of a measured figure).
# TE cast_master_weights_to_fp8, current scaling (utils.py): for EVERY FP8 weight of the model chunk,
# owned here or not, its slice of the packed amax buffer and the scale / scale_inv views (step 1)
FP8_WEIGHT_OPS = 3
# for each FP8 weight with a shard on this rank: the master shard cast to the model dtype, compute_amax,
# the Float8Tensor reshape and slice, the new Float8Quantizer's empty amax tensor, update_quantized
FP8_OWNED_OPS = 6
# once: the overflow and packed-amax buffers, the amax all_reduce, the scale update multi-tensor kernel
FP8_FIXED_OPS = 4
# each other (16-bit) owned shard: the distributed optimizer's model_param.view(-1)[start:end].copy_(main)
COPY_OPS = 3
# each owned shard tensor: Adam's per-parameter bookkeeping before its multi-tensor launches
ADAM_OPS = 1
# once: the clip's multi_tensor_scale
CLIP_OPS = 1
# each gradient bucket: its zeroing before the next step (zero_grad_buffer)
ZERO_OPS = 1


def grad_clip_host_sync(setting: bool | None, zero: int, zero1_over_ddp: bool, optimizer: str,
                        offload_optimizer: bool) -> bool:
    """Whether the step reads the gradient norm on the host before the update: `setting` when given,
    else Megatron-Core's distributed optimizer (zero 1 or 2 outside nanotron's ZeRO-1 over DDP), which
    clips at its default clip_grad 1.0; not without an update or with the update on the CPU.

    >>> grad_clip_host_sync(None, 1, False, "adamw", False), grad_clip_host_sync(None, 3, False, "adamw", False)
    (True, False)
    >>> grad_clip_host_sync(None, 1, True, "adamw", False), grad_clip_host_sync(False, 1, False, "adamw", False)
    (False, False)
    """
    if optimizer == "none" or offload_optimizer:
        return False
    if setting is not None:
        return setting
    return zero in (1, 2) and not zero1_over_ddp


def main_grad_copy_bytes(grad_bytes: float) -> float:
    """Bytes per shard parameter of prepare_grads' fp32 copy of gradients reduced at `grad_bytes` each.

    >>> main_grad_copy_bytes(2.0), main_grad_copy_bytes(4.0)
    (6.0, 0.0)
    """
    return grad_bytes + FP32_BYTES if grad_bytes < FP32_BYTES else 0.0


def grad_norm_time_s(params: float, gpu: GpuSpec, grad_bytes: float = FP32_BYTES, held_sms: int = 0) -> float:
    """GPU time of the fp32 copies of `params` shard gradients reduced at `grad_bytes` each and of the
    l2 norm over them."""
    copy = main_grad_copy_bytes(grad_bytes)
    kernels = 2 if copy else 1
    return _stream_s(params * (copy + GRAD_NORM_BYTES_PER_PARAM), gpu, held_sms) + kernels * KERNEL_OVERHEAD_S


def param_copy_bytes(fp8_share: float, precision: str) -> float:
    """Bytes per shard parameter of the copy of the updated fp32 main weights into the model's, when
    `fp8_share` of them are FP8 weights; none in fp32 training (the main weights are the model's).

    >>> param_copy_bytes(0.0, "bf16") < param_copy_bytes(1.0, "fp8"), param_copy_bytes(0.0, "fp32")
    (True, 0.0)
    """
    if precision in ("fp32", "tf32"):
        return 0.0
    return fp8_share * FP8_CAST_BYTES_PER_PARAM + (1.0 - fp8_share) * PARAM_COPY_BYTES_PER_PARAM


def update_time_s(params: float, gpu: GpuSpec, precision: str, optimizer: str, copy_bytes: float,
                  held_sms: int = 0) -> float:
    """GPU time of the update of `params` shard parameters and the copy of `copy_bytes` per parameter
    (`param_copy_bytes`) into the model's weights."""
    return optimizer_time_s(params, gpu, precision, optimizer, held_sms) + _stream_s(params * copy_bytes, gpu, held_sms)


def fp8_weights(buckets: Sequence[Sequence[tuple[float, bool]]], fp8_params: bool) -> tuple[int, float]:
    """(how many FP8 weights, the share of the parameters they hold) over `buckets`, under fp8_params."""
    total = sum(size for tensors in buckets for size, _ in tensors)
    fp8 = [size for tensors in buckets for size, is_fp8 in tensors if is_fp8] if fp8_params else []
    return len(fp8), (sum(fp8) / total if total > 0 else 0.0)


def owned_shares(sizes: Sequence[float], shard: int) -> tuple[float, ...]:
    """For each tensor of one bucket (parameter counts, in bucket order), how many of its pieces a rank
    holds on average when the bucket is cut into `shard` equal contiguous pieces: a tensor of s of the
    bucket's S parameters meets s x shard / S + 1 pieces at a random offset (at most all of them).

    >>> owned_shares([10.0], 4), owned_shares([5.0, 5.0], 1)
    ((1.0,), (1.0, 1.0))
    >>> [round(x, 3) for x in owned_shares([1.0, 99.0], 100)]
    [0.02, 1.0]
    """
    total = sum(sizes)
    if total <= 0 or shard <= 1:
        return tuple(1.0 for _ in sizes)
    return tuple(min(1.0, size / total + 1.0 / shard) for size in sizes)


def tail_dispatches(buckets: Sequence[Sequence[tuple[float, bool]]], shard: int, fp8_params: bool) -> float:
    """Host dispatches of the update after the norm's read: `buckets` hold each bucket's tensors as
    (parameters, whether it is an FP8 weight under fp8_params), `shard` ranks share each bucket.

    >>> one = [[(100.0, True), (1.0, False)]]
    >>> tail_dispatches(one, 1, True) > tail_dispatches(one, 1, False)
    True
    """
    owned_fp8 = owned_other = every_fp8 = 0.0
    for tensors in buckets:
        for (_, fp8), owned in zip(tensors, owned_shares([size for size, _ in tensors], shard)):
            if fp8 and fp8_params:
                every_fp8 += 1
                owned_fp8 += owned
            else:
                owned_other += owned
    count = CLIP_OPS + ADAM_OPS * (owned_fp8 + owned_other) + COPY_OPS * owned_other + ZERO_OPS * len(buckets)
    if every_fp8:
        count += FP8_FIXED_OPS + FP8_WEIGHT_OPS * every_fp8 + FP8_OWNED_OPS * owned_fp8
    return count


def prepare_dispatches(buckets: Sequence[Sequence[tuple[float, bool]]], shard: int) -> float:
    """Host dispatches before the norm: each owned shard's gradient view, slice and cast to fp32
    (prepare_grads), and the l2 norm's launch."""
    return 1 + COPY_OPS * sum(sum(owned_shares([size for size, _ in tensors], shard)) for tensors in buckets)
