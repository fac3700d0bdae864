"""A rank's optimizer update on the GPU, split at the gradient-norm read where the step clips on the host.

Without `plan.grad_clip_host_sync` the update is one task whose host time (a launch per layer) is
issued before the step's closing sync (a gradient norm or loss `.item()`) and hidden while the GPU
runs the passes. With it (Megatron-Core's distributed optimizer, costs/optimizer_tail.py) the update
follows a sync of its own: the fp32 copies of the shard's gradients and the l2 norm over them, the
one-float all-reduce over the gradient group, the host's read; then the update (Adam and the copy of
the main weights into the model's, FP8 weights cast by Transformer Engine, whose amaxes one all-reduce
over the gradient group combines), whose kernels the host issues one Python dispatch at a time
(costs/optimizer_tail.py tail_dispatches): its tail task starts no earlier than the read plus that host
time, so a host still issuing when the GPU is done ends the step late by the difference. An MoE model's
routed experts are a second optimizer's, over the expert-data-parallel group (`rank_buckets`): its
dispatches add to the tail, its FP8 weights' amaxes to an all-reduce over that group.
"""

from __future__ import annotations

from scalesim.costs.coalesced import dense_part, expert_tensors, param_tensor_shares, param_tensor_weights
from scalesim.costs.host import launch_host_s
from scalesim.costs.optimizer import optimizer_time_s
from scalesim.costs.optimizer_tail import (fp8_weights, grad_norm_time_s, param_copy_bytes, prepare_dispatches,
                                           tail_dispatches, update_time_s)
from scalesim.parallel.ddp import tensor_buckets


def rank_buckets(rp, local_works, experts: bool = False) -> list[list[tuple[float, bool]]]:
    """The rank's gradient buckets of whole tensors in backward order, each tensor as (parameters, is a
    block GEMM weight): `parallel.bucket_params` parameters a bucket (Megatron-Core), else `bucket_mb`
    of gradients; tensors from costs/coalesced.py param_tensor_shares. Megatron-Core keeps the routed
    experts' parameters in buffers of their own, reduced and sharded over the expert-data-parallel group
    by an optimizer of their own (distributed_data_parallel.py @0d8e0714 :143-146 and :316-323,
    `expert_parallel_buffers`; optimizer/__init__.py :647-674, a DistributedOptimizer over
    intra_expt_dp_group chained after the dense one): `experts` False gives the dense buffer's buckets
    (an MoE block without its experts), True the experts' (costs/coalesced.py expert_tensors: one tensor
    per local expert and linear, as Transformer Engine's GroupedLinear holds them)."""
    b, plan = rp.b, rp.plan
    tensors = []
    for w in reversed(local_works):
        layer, expert = w.layer, b._expert_trained(w.layer)      # LoRA trains no expert: the layer as a whole
        if experts:
            layer_tensors = tuple((size, weight) for size, weight in expert_tensors(layer)) if expert else ()
        else:
            dense = dense_part(layer) if expert else layer
            layer_tensors = tuple((share * (b._trained(layer) - expert), weight and layer.kind == "transformer_block")
                                  for share, weight in zip(param_tensor_shares(dense), param_tensor_weights(dense)))
        tensors.append(layer_tensors[::-1])
    cap = plan.bucket_params if plan.bucket_params is not None else plan.bucket_bytes / b.grad_bytes_per_param
    flat = [t for layer in tensors for t in layer]
    out, start = [], 0
    for _, _, count in tensor_buckets([tuple(size for size, _ in layer) for layer in tensors], cap, cap):
        out.append(flat[start:start + count])
        start += count
    return out


def updated(rp, params: float, local_works, done: tuple) -> int:
    """The update of `params` parameters after the tasks `done`; returns the task that ends it."""
    plan, b = rp.plan, rp.b
    if not (plan.grad_clip_host_sync and plan.host_dispatch_s > 0):
        timing = (("optimizer", params), ("optimizer", params),
                  lambda held_sms, gpu: optimizer_time_s(params, gpu, plan.precision, plan.optimizer, held_sms))
        seconds = optimizer_time_s(params, b.gpu, plan.precision, plan.optimizer)
        # Fused multi-tensor optimizers launch a few kernels per layer's tensors; the step ends on a
        # sync (gradient norm or loss `.item()`), so the next step's first kernels are issued only after it.
        return rp.compute("optimizer step", "optimizer", seconds, 0.0, deps=done, timing=timing,
                          host_s=launch_host_s(len(local_works), plan.host_dispatch_s, False),
                          host_sync=plan.host_dispatch_s > 0)
    # the dense optimizer's buffer over the gradient group, the experts' over the expert-data-parallel group
    experts = rank_buckets(rp, local_works, experts=True)
    optimizers = [(buckets, len(group) if plan.zero >= 1 else 1, group, span) for buckets, group, span in
                  ((rank_buckets(rp, local_works), rp.grad_group, ("dp", "cp")),) +
                  (((experts, rp.edp_group, rp.expert_span),) if experts else ())]
    # one l2 norm over both optimizers' gradients (ChainedOptimizer.get_grad_norm, one group): its launch once
    prepare = sum(prepare_dispatches(buckets, shard) for buckets, shard, _, _ in optimizers) - (len(optimizers) - 1)
    norm = rp.compute("grad norm", "optimizer", grad_norm_time_s(params, b.gpu, b.grad_bytes_per_param), 0.0,
                      deps=done, host_s=prepare * plan.host_dispatch_s)
    reduced = rp.call("grad_norm", "all_reduce", rp.grad_group, 4.0, "comm", (norm,), ("dp", "cp"))
    read = rp.compute("grad norm read", "other", 0.0, 0.0, deps=(norm if reduced is None else reduced,),
                      host_sync=True)
    # FP8 master weights only in full training: LoRA's optimizer holds the adapters, the FP8 base is frozen
    fp8_params = plan.fp8_param_gather and plan.precision == "fp8" and plan.finetune is None
    # each chained optimizer clips, updates and copies its own shard (its own cast_master_weights_to_fp8)
    dispatches = sum(tail_dispatches(buckets, shard, fp8_params) for buckets, shard, _, _ in optimizers)
    # Adam, then the copy of the updated main weights into the model's (FP8 weights: cast, amax, quantize)
    weights = [fp8_weights(buckets, fp8_params) for buckets, _, _, _ in optimizers]
    held = [sum(size for bucket in buckets for size, _ in bucket) / shard for buckets, shard, _, _ in optimizers]
    share = weights[0][1] if len(weights) == 1 else sum(s * h for (_, s), h in zip(weights, held)) / sum(held)
    copy = param_copy_bytes(share, plan.precision)
    key = ("optimizer+copy", params, copy)
    update = rp.compute("optimizer step", "optimizer",
                        update_time_s(params, b.gpu, plan.precision, plan.optimizer, copy), 0.0, deps=(read,),
                        timing=(key, key, lambda held_sms, gpu: update_time_s(params, gpu, plan.precision,
                                                                              plan.optimizer, copy, held_sms)))
    # TE's one all-reduce (max) of the FP8 weights' packed amaxes over each optimizer's group, between its two loops
    ends = []
    for (count, _), (_, _, group, span) in zip(weights, optimizers):
        amax = rp.call("fp8_amax", "all_reduce", group, 4.0 * count, "comm", (update,), span)
        # The update's kernels run as the host issues them; the last of them is issued after all its dispatches
        # (the amax all-reduce's own dispatch, one of FP8_FIXED_OPS, is the collective's).
        dispatches -= amax is not None
        ends.append(amax)
    deps = tuple(amax for amax in ends if amax is not None) or (update,)
    return rp.compute("optimizer tail", "other", 0.0, 0.0, deps=deps,
                      host_s=dispatches * plan.host_dispatch_s, host_sync=True)
