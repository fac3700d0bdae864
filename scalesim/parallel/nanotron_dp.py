"""nanotron's data-parallel gradient path, as a RankProgram (rank_program.py) plays it.

nanotron (@67c5ebb6, the commit its benchmark sweep ran; torch 2.1 per its run_multinode.sh) wraps
the model in torch DDP and registers its fp32 accumulation hook (helpers.py init_optimizer_and_grad_accumulator,
optim/gradient_accumulator.py get_fp32_accum_hook): DDP forms the buckets, the hook reduces the fp32
buffers, all-reducing each tensor without ZeRO and reduce-scattering per-rank slices with ZeRO-1
(`parallel.zero1_over_ddp`), whose parameter all-gather copies the slices back one by one. The host
figures are in scalesim/costs/coalesced.py. Each function takes the RankProgram it adds tasks to.

With `accumulate_grad_in_fp32` and ZeRO-1 (`grad_accumulation: fp32-add`, zero 1, zero1_over_ddp false:
`fp32_unwrapped`) nanotron builds no DDP at all (trainer.py:797-799 make_ddp), as its benchmark sweep ran
(scaling_benchmarks.py:16 ACCUMULATE_GRAD_IN_FP32 = True; every successful ZeRO-1 job of the sweep's CSV logs
accumulate_grad_in_fp32 True): no buckets, no hook. After the whole pipeline trainer.py:525-534 calls
sync_gradients_across_dp(reduce_scatter=False), i.e. one blocking `dist.all_reduce` of the contiguous fp32
gradient buffer of every parameter of the stage over the dp group (gradient_accumulator.py:155); the
optimizer's all-gather of the updated slices is the same code as under DDP (optim/zero.py:119, 217-250).
"""

from __future__ import annotations

from scalesim.costs.coalesced import (all_gather_copy_host_s, param_tensor_shares, param_tensors,
                                      reduce_scatter_hook_host_s)
from scalesim.costs.compute import KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s
from scalesim.costs.memory import with_tied_head_copy
from scalesim.parallel.ddp import ddp_buckets, tensor_buckets
from scalesim.parallel.megatron_dp import dense_grad_bytes, megatron_buckets
from scalesim.program import COMM_STREAM, ComputeTask

# FP32GradientAccumulator's buffer: torch.zeros(..., dtype=torch.float) (gradient_accumulator.py:173)
FP32_BYTES = 4.0


def fp32_unwrapped(plan) -> bool:
    """nanotron's ZeRO-1 with fp32 accumulation, without DDP (trainer.py:797-799): reduced after the backward."""
    return plan.zero == 1 and plan.grad_accumulation == "fp32-add" and not plan.zero1_over_ddp


def fp32_hooked(plan) -> bool:
    """DDP's buckets go through nanotron's fp32 accumulation hook, reduce-scattered per rank slice at ZeRO-1: only
    with an FP32GradientAccumulator (helpers.py:416-417 registers the hook when `grad_accumulator is not None`).
    `zero1_over_ddp` without fp32-add (nanotron at ZeRO-1 with accumulate_grad_in_fp32 false, as the nanotron
    preset sets it) is plain DDP: its own all-reduce of each 16-bit bucket, no slice flattening or shard copies;
    the optimizer's all-gather and its copies back are ZeroDistributedOptimizer's either way (zero.py:217-251)."""
    return plan.zero1_over_ddp and plan.grad_accumulation == "fp32-add"


def bucket_op(plan) -> str:
    """The collective of one DDP bucket: all-reduce, reduce-scatter of per-rank slices under ZeRO-1/2."""
    return "all_reduce" if plan.zero == 0 or plan.zero1_over_ddp and not fp32_hooked(plan) else "reduce_scatter"


def buckets(rp, work) -> list[tuple[float, int, int]]:
    """The chunk's DDP buckets in backward order: (reduced bytes, position of the layer that fills
    it, calls). Under nanotron's fp32 accumulation hook (grad_accumulation fp32-add) buckets hold
    whole parameter tensors (ddp.tensor_buckets), sized by their bf16 gradients: torch DDP sizes
    buckets by the parameters' own gradients (reducer.cpp compute_bucket_assignment_by_size,
    numel * element_size) while the hook reduces the fp32 buffers (optim/gradient_accumulator.py
    get_fp32_accum_hook, @67c5ebb6), so a 25 MiB bucket is reduced as 50 MiB. Without ZeRO the hook
    calls torch's all_reduce_coalesced, which ProcessGroupNCCL runs as one ncclAllReduce per tensor
    inside an NCCL group (ProcessGroupNCCL.cpp allreduce_coalesced -> collectiveCoalesced): a call
    per tensor, each with its own latency; with ZeRO-1 one reduce-scatter per bucket."""
    plan, b = rp.plan, rp.b
    if fp32_unwrapped(plan):
        return []               # no DDP: nothing is reduced during the backward (fp32_buffer_reduced)
    grads = [dense_grad_bytes(b, w.layer) for w in reversed(work)]
    if plan.bucket_params is not None:        # Megatron-Core's whole-tensor buckets (parallel/megatron_dp.py)
        return megatron_buckets(rp, work, grads)
    if plan.grad_accumulation != "fp32-add":
        return [(size, position, 1) for size, position in ddp_buckets(grads, plan.bucket_bytes)]
    tensors = [tuple(share * size for share in reversed(param_tensor_shares(w.layer)))
               for w, size in zip(reversed(work), grads)]
    cap = plan.bucket_bytes * b.grad_bytes_per_param / b.weight_bytes_per_param
    return [(size, position, count if plan.zero == 0 else 1)
            for size, position, count in tensor_buckets(tensors, cap)]


def slices_flattened(rp, size: float, dep: int | None) -> int | None:
    """nanotron's hook flattens the bucket's per-rank slices and torch copies them into NCCL's flat
    input before the reduce-scatter (costs/coalesced.py): CPU time on the backward's thread, `dp`
    small copies of the whole bucket on the communication stream."""
    plan, b = rp.plan, rp.b
    dp = len(rp.grad_group)
    if not fp32_hooked(plan) or dp <= 1:
        return dep
    seconds = dp * KERNEL_OVERHEAD_S + 2 * size / streaming_bw_bytes_per_s(b.gpu)
    rp.list.append(ComputeTask("bucket slices flattened", "other", seconds * plan.slowest_gpu_factor,
                               deps=() if dep is None else (dep,), stream=COMM_STREAM,
                               host_s=reduce_scatter_hook_host_s(dp, plan.host_dispatch_s)))
    return len(rp.list) - 1


def gathered_copied(rp, works, params: float, dep: int | None) -> None:
    """nanotron's ZeRO-1 all-gather flattens the output slices and copies every gathered slice back
    into its parameter from Python (costs/coalesced.py): host-bound, `dp` x tensors launches."""
    plan, b = rp.plan, rp.b
    dp = len(rp.grad_group)
    if not (plan.zero1_over_ddp or fp32_unwrapped(plan)) or dp <= 1:
        return
    tensors = sum(param_tensors(w.layer) for w in works)
    seconds = KERNEL_OVERHEAD_S + 4 * params * b.weight_bytes_per_param / streaming_bw_bytes_per_s(b.gpu)
    rp.compute("zero-1 gathered slices copied", "other", seconds, 0.0, (dep,),
               host_s=all_gather_copy_host_s(dp, tensors, plan.host_dispatch_s))


def shard_copied(rp, size: float, call: int | None) -> None:
    """nanotron's reduce_scatter_coalesced returns `work.get_future().then(update_output)`: torch runs
    the callback at once on a pool stream made to wait for the call's CUDA event (ATen ivalue
    Future::invokeCallback, synchronizeWithCurrentStreams), and copies the shard into the
    parameters' slices there. Its benchmark runs set CUDA_DEVICE_MAX_CONNECTIONS=1 (run_multinode.sh
    @67c5ebb6): every stream shares one hardware work queue (CUDA C++ Programming Guide, "CUDA
    environment variables"; "essentially having a single stream", NVIDIA/Megatron-LM issue #533), so
    that wait holds back the backward kernels issued after it until the reduce-scatter ends (an
    inference from those two sources, not a measurement); modelled as the copy on the compute stream."""
    plan, b = rp.plan, rp.b
    dp = len(rp.grad_group)
    if not fp32_hooked(plan) or dp <= 1 or call is None:
        return
    seconds = KERNEL_OVERHEAD_S + 2 * size / dp / streaming_bw_bytes_per_s(b.gpu)
    rp.compute("reduce-scatter shard copied", "other", seconds, 0.0, (call,), host_s=plan.host_dispatch_s)


def fp32_buffer_reduced(rp, work, dep: int | None, final: bool) -> None:
    """`fp32_unwrapped`: after the last micro-batch's backward (its fp32 add done, `dep`), one all-reduce of the
    chunk's whole fp32 gradient buffer over the dp group (gradient_accumulator.py:155 `dist.all_reduce(
    self._contiguous_fp32_grad_buffer, op=AVG, group=dp_pg)`, called from trainer.py:525-534 after
    train_batch_iter): in fp32 whatever the reduce type, in place, exposed (the optimizer step waits for it).
    The buffer holds every parameter of the stage, the last stage's copy of a tied embedding too (tied_parameters.py;
    costs/memory.py with_tied_head_copy), whose sum across the stages follows (RankProgram._tied_reduce)."""
    b = rp.b
    if not final or not fp32_unwrapped(rp.plan) or len(rp.grad_group) <= 1:
        return
    layers = with_tied_head_copy([w.layer for w in work], b.model.vocab, b.model.hidden, rp.pl.tp)
    params = sum(b._trained(w.layer) - b._expert_trained(w.layer) for w in work)
    if rp.plan.finetune is None:                        # the tied head's copy (adapters only under LoRA)
        params += sum(layer.params for layer in layers) - sum(w.layer.params for w in work)
    rp.reductions.append(rp.call("grad", "all_reduce", rp.grad_group, params * FP32_BYTES, "comm",
                                 () if dep is None else (dep,), ("dp", "cp")))
