"""Megatron-Core's data-parallel specifics: whole-tensor gradient buckets, the NaN check before each
bucket's reduction, and parameter all-gathers dispatched with the optimizer step.

Buckets (`parallel.bucket_params`, Megatron-Core DistributedDataParallelConfig.bucket_size): the
gradient buffer is cut into buckets of whole parameter tensors in backward order, a bucket closing once
it holds at least `bucket_size` parameters (megatron/core/distributed/param_and_grad_buffer.py,
_ParamAndGradBuffer: "If current bucket is full, finalize it"); unlike torch DDP there is no small
first bucket. A bucket_size smaller than any tensor gives one bucket, one reduction, per tensor.

NaN check (`parallel.grad_nan_check`, check_for_nan_in_grad): before a bucket group's reduction,
_ParamAndGradBucketGroup.check_grads computes `bucket.grad_data.norm(p=2)` and hands it to the rerun
state machine's validate_result twice (rejection_func torch.isnan, then torch.isinf); with reruns
disabled that evaluates the rejection as a Python bool, a device-to-host copy that waits for the compute
stream. So each bucket costs a norm kernel over its gradients and two host syncs, during which the
backward's next kernels are not yet issued.

Per-rank views (`parallel.bucket_params`, the distributed optimizer: zero 1-2): before each bucket's
reduce-scatter and all-gather Megatron-Core cuts the bucket into one view per data-parallel rank from
Python (param_and_grad_buffer.py shard_buffer; costs/coalesced.py shard_views_host_s). Host time only:
before a reduce-scatter it follows the NaN check's syncs, so the GPU, drained by them, waits for it.

Aligned all-gathers (`parallel.align_param_gather`, DistributedDataParallelConfig.align_param_gather): each
module's forward pre-hook waits for its bucket's all-gather, dispatching it first if no one has, and skips
dispatching the next bucket's, leaving that to the pipeline schedule's param_sync_func
(distributed_data_parallel.py _make_forward_pre_hook, param_and_grad_buffer.py finish_param_sync), which
only the interleaved schedule calls (pipeline_parallel/schedules.py; NeMo sets it, _strategy_lib.py
setup_megatron_optimizer @v2.4.0). Without virtual stages nothing gathers ahead: each bucket's all-gather
is issued as its module is reached, after the compute issued before it (ProcessGroupNCCL has the NCCL
stream wait for the current stream), and the module waits for it; one call per bucket.

All-gathers with the optimizer step (`parallel.param_gather_with_optimizer_step`,
overlap_param_gather_with_optimizer_step): right after the update the optimizer calls the model chunk's
DistributedDataParallel.start_param_sync(force_dispatch=True), which dispatches the all-gather of every
bucket group at once, and the forward pre-hooks then only wait (skip_next_bucket_dispatch)
(megatron/core/distributed/distributed_data_parallel.py). Megatron's recipes run with
CUDA_DEVICE_MAX_CONNECTIONS=1: every stream feeds one hardware work queue (CUDA C++ Programming Guide,
"CUDA environment variables"; "essentially having a single stream", NVIDIA/Megatron-LM issue #533), in
which each all-gather waits for the one before it on the communication stream, so the forward's kernels,
issued after them all, start once the all-gathers have run: none overlaps the forward. An inference from
those sources, not a measurement. (The dispatch is ChainedOptimizer.step_with_ready_grads', optimizer.py;
should the chunk's optimizer not be chained, nothing dispatches early, and each bucket's pre-hook
dispatches its own all-gather and waits for it, skipping the next: the same exposure, without the queue.)
NVIDIA's Llama 3.1 8B MLPerf v5.1 configs turn the option off for their pipeline-free runs
(config_common_8b.sh OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=False). Megatron-LM refuses the option without
interleaving ("only supported with interleaved pipeline parallelism", megatron/training/arguments.py
validate_args @d98e8a64; virtual_pipeline_model_parallel_size is None at one virtual stage), and then only
the first model chunk gathers with the step (megatron/core/optimizer/__init__.py, "Separate out first
model chunk"); scalesim refuses it likewise (app/plan_checks.py).
"""

from __future__ import annotations

from scalesim.costs.coalesced import param_tensor_shares, shard_views_host_s
from scalesim.costs.compute import KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s
from scalesim.parallel.ddp import tensor_buckets
from scalesim.program import COMM_STREAM, ComputeTask


def dense_grad_bytes(b, layer) -> float:
    """The gradient bytes of a layer's trained parameters outside its experts (builder `b`), the bytes its
    data-parallel buckets reduce."""
    return (b._trained(layer) - b._expert_trained(layer)) * b.grad_bytes_per_param


def dense_gathered_bytes(b, layer) -> float:
    """The bytes of a layer's parameters outside its routed experts as its parameter all-gathers carry
    them (builder `b`): its stored bytes less the experts' share, which the expert-data-parallel ranks
    gather apart."""
    stored = b._stored(layer)
    per_param = stored / layer.params if b.plan.finetune is None and layer.params else b.weight_bytes_per_param
    return stored - b._expert_trained(layer) * per_param


def gather_rates(b, layer) -> tuple[float, ...]:
    """Gathered bytes per reduced gradient byte of each of the layer's parameter tensors, in forward order
    (costs/coalesced.py param_tensor_shares): the layer's, except that under fp8_param_gather a block's
    GEMM weights gather in FP8 and its other tensors (norm weights, biases) in their 16-bit dtype, each
    parameter in its own: Megatron-Core keeps FP8 parameters in a uint8 buffer of their own and gathers
    every bucket's `param_data` in its buffer's dtype (megatron/core/distributed/param_and_grad_buffer.py
    @d98e8a64: group_params_for_buffers, "torch.uint8 for FP8/NVFP4 parameters, else param.dtype";
    _ParamAndGradBucketGroup.start_param_sync, one all_gather_into_tensor per bucket). Its buckets never mix
    the two (the 16-bit buckets join the last FP8 bucket's group, partition_buckets); scalesim's are cut over
    all of a chunk's tensors in backward order, so their bytes follow that, not their boundaries."""
    plan, own = b.plan, dense_grad_bytes(b, layer)
    per_tensor = plan.gathered_tensor_bytes(layer, b.weight_bytes_per_param)
    if own <= 0:
        return (0.0,) * len(per_tensor)
    rate = dense_gathered_bytes(b, layer) / own
    if plan.finetune is not None:       # the stored base and the adapters: as the layer's
        return (rate,) * len(per_tensor)
    mean = plan.gathered_bytes_per_param(layer, b.weight_bytes_per_param)
    return tuple(rate * per_param / mean for per_param in per_tensor)


def _grad_tensors(work, grads: list[float]) -> list[tuple[float, ...]]:
    """Each layer's gradient tensors in backward order (layers too, as `grads`, their reduced bytes)."""
    return [tuple(share * size for share in reversed(param_tensor_shares(w.layer)))
            for w, size in zip(reversed(work), grads)]


def megatron_buckets(rp, work, grads: list[float]) -> list[tuple[float, int, int]]:
    """The chunk's buckets in backward order, (reduced bytes, position of the layer that fills it, 1):
    whole tensors (costs/coalesced.py param_tensor_shares), closing at `bucket_params` parameters.
    `grads` are the layers' reduced gradient bytes in backward order."""
    cap = rp.plan.bucket_params * rp.b.grad_bytes_per_param
    return [(size, position, 1) for size, position, _ in tensor_buckets(_grad_tensors(work, grads), cap, cap)]


def gathered_buckets(rp, work) -> list[tuple[float, int]]:
    """The chunk's buckets (`megatron_buckets`) in backward order as their parameter all-gathers carry them:
    (gathered bytes, position of the layer that fills it), each tensor at its own rate (`gather_rates`)."""
    b = rp.b
    tensors = _grad_tensors(work, [dense_grad_bytes(b, w.layer) for w in reversed(work)])
    rates = [rate for w in reversed(work) for rate in reversed(gather_rates(b, w.layer))]
    gathers = [size * rate for size, rate in zip((size for layer in tensors for size in layer), rates)]
    cap = rp.plan.bucket_params * b.grad_bytes_per_param
    out, start = [], 0
    for _, position, count in tensor_buckets(tensors, cap, cap):
        out.append((sum(gathers[start:start + count]), position))
        start += count
    return out


def sharded(rp, buckets: int, dep: int | None) -> int | None:
    """The host cutting `buckets` buckets into per-rank views before their collective is issued (Megatron-Core's
    distributed optimizer with its own buckets): a task of no GPU time carrying that CPU time."""
    plan = rp.plan
    host_s = buckets * shard_views_host_s(len(rp.grad_group), plan.host_dispatch_s)
    if plan.bucket_params is None or not 1 <= plan.zero <= 2 or host_s <= 0:
        return dep
    rp.list.append(ComputeTask("bucket shard views", "other", 0.0, deps=() if dep is None else (dep,),
                               stream=COMM_STREAM, host_s=host_s))
    return len(rp.list) - 1


def reduce_prepared(rp, size: float, dep: int | None) -> int | None:
    """What precedes a Megatron-Core bucket's reduce-scatter on the host: the NaN check, then the views."""
    return sharded(rp, 1, nan_checked(rp, size, dep))


def lazily_gathered(plan) -> bool:
    """Each bucket's all-gather dispatched by its own module's pre-hook and waited at once (see above)."""
    return (plan.align_param_gather and not plan.param_gather_with_optimizer_step and plan.virtual_stages == 1
            and 1 <= plan.zero <= 2)


def gather_after(rp) -> int | None:
    """What a layer's parameter all-gather waits for: the start of the layer two back (gathered ahead), or,
    when nothing gathers ahead (`lazily_gathered`), all the work issued before it (the previous layer's end)."""
    if lazily_gathered(rp.plan):
        return len(rp.list) - 1 if rp.list else None
    return rp.layer_computes[-2] if len(rp.layer_computes) >= 2 else None


def layer_buckets(rp, work) -> list[float] | None:
    """Gathered bytes (`gathered_buckets`) of the Megatron-Core buckets whose first parameter, in forward
    order, is this layer's (a bucket closes, in backward order, at that layer); None without such buckets
    or the layer's chunk.

    Each chunk's buckets are worked out once, when the rank first asks for one of its layers, and kept in
    `rp.dp_buckets` (id of a layer's work -> its buckets; "chunk": id -> the chunk's index): linear in the
    layers, where working the chunk out again for each of its layers was quadratic."""
    if rp.plan.bucket_params is None or not 1 <= rp.plan.zero <= 2:
        return None
    known = rp.dp_buckets
    if "chunk" not in known:
        known["chunk"] = {id(w): g for g, c in enumerate(rp.b.chunk_work) for w in c}
    if id(work) not in known:
        g = known["chunk"].get(id(work))
        if g is None:
            return None
        chunk = rp.b.chunk_work[g]
        closing: dict[int, list[float]] = {}
        for size, position in gathered_buckets(rp, chunk):
            closing.setdefault(position, []).append(size)
        known.update((id(w), closing.get(position, [])) for position, w in enumerate(reversed(chunk)))
    return known[id(work)]


def gathered(rp, work, family: str, size: float, dep: int | None) -> int | None:
    """The layer's parameter all-gather (`size` bytes, after `dep`): one call, or with Megatron-Core's buckets
    one per bucket starting at this layer (none if its parameters came with an earlier layer's bucket), each
    after its per-rank views, of its tensors' gathered bytes (`gathered_buckets`)."""
    buckets = layer_buckets(rp, work)
    own = dense_grad_bytes(rp.b, work.layer)
    if buckets is None or own <= 0:
        return rp.call(family, "all_gather", rp.grad_group, size, "comm", (dep,), ("dp", "cp"))
    for bucket in buckets:
        dep = rp.call(family, "all_gather", rp.grad_group, bucket, "comm", (sharded(rp, 1, dep),), ("dp", "cp"))
    return dep if buckets else None


def nan_checked(rp, size: float, dep: int | None) -> int | None:
    """The bucket's NaN / Inf check on the compute stream before its reduction (`size` gradient bytes
    read by the norm): the norm and isnan kernels, a host sync, the isinf kernel, a host sync."""
    plan = rp.plan
    if not plan.grad_nan_check:
        return dep
    sync = plan.host_dispatch_s > 0
    norm_s = 2 * KERNEL_OVERHEAD_S + size / streaming_bw_bytes_per_s(rp.b.gpu)
    dep = rp.compute("grad norm isnan check", "other", norm_s, 0.0, (dep,),
                     host_s=2 * plan.host_dispatch_s, host_sync=sync)
    return rp.compute("grad norm isinf check", "other", KERNEL_OVERHEAD_S, 0.0, (dep,),
                      host_s=plan.host_dispatch_s, host_sync=sync)


def gathered_with_optimizer_step(rp, g: int, mb: int) -> tuple[int, ...]:
    """The all-gathers of every layer of the rank's first chunk `g`, all dispatched before its first
    forward (micro-batch 0) when the plan gathers with the optimizer step: what that forward waits for.
    Later calls of `rp.gather` for these layers issue nothing (they are gathered once a step)."""
    plan = rp.plan
    if not plan.param_gather_with_optimizer_step or mb != 0 or g != rp.stage:
        return ()
    return tuple(i for w in rp.b.chunk_work[g] for i in rp.gather(w))
