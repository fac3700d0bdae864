"""PyTorch FSDP's own kernels around its collectives (`parallel.fsdp_version`), as a RankProgram plays them.

ZeRO-3 (`parallel.zero: 3`, rank_program.py) all-gathers each unit's parameters before its forward and
backward and reduce-scatters its gradients after. DeepSpeed-style flat buffers need nothing more;
PyTorch's two FSDPs add memory-bound passes over the whole unit (torch v2.4-v2.6):

- FSDP1 (FullyShardedDataParallel, a FlatParameter per unit): the parameters are views into the
  gathered flat buffer, so an all-gather needs no copy out. The views are made in the forward under
  autograd ("We use `Tensor` views in the forward so that they are tracked by autograd", fsdp/_flat_param.py
  _use_unsharded_flat_param: torch.split of the flat parameter, then .view per parameter), so the unit's
  gradient reaches the FlatParameter through split_with_sizes' backward, which concatenates the parameters'
  gradients into a new flat tensor (torch/csrc/autograd/FunctionsManual.cpp split_with_sizes_backward:
  at::cat): one copy of the unit's gradient on the compute stream, as autograd's engine runs it, the
  counterpart of FSDP2's copy-in below. After the unit's backward the post-backward
  hook (fsdp/_runtime_utils.py _post_backward_hook, on its post-backward stream) casts the unsharded
  gradient to MixedPrecision.reduce_dtype when that differs from param_dtype, and the default
  reduce-scatter hook divides it by the pre-divide factor (algorithms/_comm_hooks/default_hooks.py
  DefaultState._get_gradient_predivide_factor: 2 for 2 ranks, 4 for 8, > 1 for any group of two or
  more) before the call: one pass over the unit's gradient each.
- FSDP2 (fully_shard, a DTensor per parameter): foreach_all_gather_copy_out copies each gathered unit
  from the all-gather's flat output into the parameters (torch.split_with_sizes_copy), on the compute
  stream before the unit runs (_fsdp_param_group.py wait_for_unshard); the reduce-scatter's copy-in
  (foreach_reduce_scatter_copy_in, torch._chunk_cat into a buffer of reduce_dtype) runs on the compute
  stream too, before the reduce-scatter stream takes over (_fsdp_collectives.py foreach_reduce). bf16
  and fp32 reductions are averaged by NCCL (ReduceOp.AVG), with no divide pass.

HSDP (`parallel.hsdp_shard`: FSDP1's ShardingStrategy.HYBRID_SHARD, FSDP2's 2-D mesh) shards each unit over
`hsdp_shard` consecutive data-parallel ranks (one node's GPUs, torch's default intra-node process group,
fsdp/_init_utils.py _init_intra_and_inter_node_groups) and replicates it across the others: the all-gathers and
reduce-scatters run in the shard group, then each rank's reduced shard is all-reduced across its replicas, the
ranks holding the same shard, on a stream of its own (FSDP1's _all_reduce_stream, over the inter-node process
group: fsdp/_runtime_utils.py _reduce_grad, torch v2.2). The optimizer updates a 1/`hsdp_shard` shard.

Neither FSDP reshards the root unit after its forward, so its backward needs no all-gather (`regathered`).
The all-gather's copy-in (each rank's own shard, 1/dp of the unit) is left out, as is the memory of
FSDP2's all-gather output beside the unsharded parameters. Each function takes the RankProgram it adds
tasks to and returns what the next task waits for.
"""

from __future__ import annotations

from scalesim.costs.compute import KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s
from scalesim.costs.fsdp_host import hook_host_s, original_params
from scalesim.parallel.copies import copy_task
from scalesim.parallel.megatron_dp import dense_gathered_bytes
from scalesim.program import ComputeTask

# FSDP1's post-backward stream: its casts wait for the unit's backward, not for earlier reduce-scatters
# (ProcessGroupNCCL runs those on its own NCCL stream).
POST_BACKWARD_STREAM = "fsdp_post_backward"


def copied_out(rp, work, gathered: tuple[int, ...]) -> tuple[int, ...]:
    """FSDP2's copy-out of a gathered unit (read and write its 16-bit parameters) once `gathered`, placed on the
    compute stream as the unit is about to run (wait_for_unshard, called from its pre-forward or pre-backward
    hook), not where a prefetched all-gather is issued: the unit before it runs first."""
    size = dense_gathered_bytes(rp.b, work.layer)
    if rp.plan.fsdp_version != 2 or not gathered or len(rp.grad_group) <= 1 or size <= 0:
        return gathered
    return (copy_task(rp, "fsdp all-gather copy-out", "other", size, gathered),)


def reduce_input(rp, work, params: float, dep: int | None) -> int | None:
    """The passes over `work`'s unsharded gradient before its reduce-scatter (see the module's text), and
    its post-backward hook's CPU time."""
    plan, b = rp.plan, rp.b
    if plan.fsdp_version is None or params <= 0:
        return dep
    grad, reduced = b.weight_bytes_per_param, b.grad_bytes_per_param
    deps = () if dep is None else (dep,)
    hook_s = hook_host_s(plan.fsdp_version, original_params(work.layer), "post_backward", plan.host_dispatch_s,
                         len(rp.replica_group) > 1)       # the post-backward hook's own ops (costs/fsdp_host.py)
    if plan.fsdp_version == 2:
        copy_in = copy_task(rp, "fsdp reduce-scatter copy-in", "other", params * grad, deps, params * reduced)
        rp.list[copy_in].host_s += hook_s
        return copy_in
    deps = (copy_task(rp, "fsdp1 flat gradient cat", "other", params * grad, deps),)   # split's backward
    passes = [2 * reduced] + ([grad + reduced] if reduced != grad else [])   # the divide; the cast when wider
    seconds = len(passes) * KERNEL_OVERHEAD_S + params * sum(passes) / streaming_bw_bytes_per_s(b.gpu)
    rp.list.append(ComputeTask("fsdp gradient cast and pre-divide", "other", seconds * plan.slowest_gpu_factor,
                               deps=deps, stream=POST_BACKWARD_STREAM,
                               host_s=len(passes) * plan.host_dispatch_s + hook_s))
    return len(rp.list) - 1


def regathered(rp, work) -> tuple[int, ...]:
    """The unit's parameters gathered again for its backward, or nothing when FSDP kept them gathered from its
    forward: the root's, the layers outside the transformer blocks (embedding, final norm, head), which
    neither FSDP reshards after forward (torch v2.5 FSDP1 fsdp/_runtime_utils.py _post_forward_reshard:
    `not state._is_root`; FSDP2 _composable/fsdp/_fsdp_state.py _lazy_init: the root's
    post_forward_mesh_info = None), and with `fsdp_keep_last_block` the last transformer block (torchtitan's
    apply_fsdp without PP: reshard_after_forward = layer_id < len(model.layers) - 1)."""
    if rp.plan.fsdp_version is not None and kept_gathered(rp, work):
        return ()
    return rp.gather(work, "backward")


def kept_gathered(rp, work) -> bool:
    """Whether FSDP keeps the unit gathered from its forward to its backward (`regathered`)."""
    plan = rp.plan
    block = work.layer.kind == "transformer_block"
    if not block or plan.fsdp_keep_last_block and rp.pl.pp == 1:
        blocks = [w for chunk in rp.b.chunk_work for w in chunk if w.layer.kind == "transformer_block"]
        return bool(blocks) and (not block or work is blocks[-1])
    return False


def hsdp_groups(pl, coords: dict[str, int], shard: int | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the group a unit is sharded over, the ranks holding the same shard): without HSDP the whole
    data-parallel group and none; with it, `shard` consecutive data-parallel ranks and every shard-th."""
    group = pl.grad_group(coords)
    if shard is None or shard >= len(group):
        return group, ()
    dp = coords["dp"]
    first = dp - dp % shard
    ranks = [pl.rank(**{**coords, "dp": d}) for d in range(pl.dp)]
    return tuple(sorted(ranks[first:first + shard])), tuple(sorted(ranks[dp % shard::shard]))


def replicated(rp, params: float) -> None:
    """HSDP: the rank's reduced shard of a unit's gradient all-reduced across its replicas, after the unit's
    reduce-scatter (the last of `rp.reductions`), on its own stream; the optimizer step waits for it."""
    if len(rp.replica_group) <= 1 or params <= 0 or not rp.reductions:
        return
    size = params / len(rp.grad_group) * rp.b.grad_bytes_per_param
    rp.reductions.append(rp.call("grad_replica", "all_reduce", rp.replica_group, size, "hsdp_all_reduce",
                                 (rp.reductions[-1],), ("replica",)))
