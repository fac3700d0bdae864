"""PyTorch FSDP's hooks on the host, and FSDP1's rate limiter, as a RankProgram plays them.

Each unit's unshard (its pre-forward, or the pre-backward that prefetches it) is a task of no GPU
time on a stream of its own, placed where the host runs the hook: after the kernels issued before
it, before the unit's all-gather, which waits for it. It carries the hooks' CPU time
(costs/fsdp_host.py): the pre- and post-forward hooks with the forward's unshard, the pre-backward
hook with the backward's; the post-backward hook's time goes with the gradient's first task after
the unit's backward (parallel/fsdp.py reduce_input).

FSDP1's rate limiter (`limit_all_gathers=True`, FullyShardedDataParallel's default, which fms-fsdp,
Composer and fsdp_qlora keep): every reshard that frees a unit's unsharded parameters records a CUDA
event on the compute stream after the unit's kernels and queues it (fsdp/_runtime_utils.py
`_reshard`: `free_event.record()`, `_free_event_queue.enqueue`); every `_unshard` first dequeues the
oldest event once two are queued and blocks the CPU on it (`dequeue_if_needed`,
`event.synchronize()` under "FullyShardedDataParallel.rate_limiter"; fsdp/_limiter_utils.py
`_FreeEventQueue`, `_max_num_inflight_all_gathers = 2`, torch v2.0-v2.5). So the unshard task
waits for that unit's last kernel and, with a host thread, is a host sync: the host issues nothing
more until the GPU has run that far, and the all-gather starts no earlier. The queue is kept on the
RankProgram (`free_events`) and played in program order, which is the host's: a unit's free is
queued after its forward (units resharded after forward: parallel/fsdp.py `kept_gathered`)
and after its backward (FULL_SHARD and HYBRID_SHARD free in the post-backward hook,
`_should_free_in_backward`). The post-backward hook reshards before it prefetches (BACKWARD_POST),
the pre-backward hook prefetches before the unit's backward (BACKWARD_PRE): both orders come out of
the program order here. FSDP2 has no such queue (costs/fsdp_host.py).
"""

from __future__ import annotations

from scalesim.costs.fsdp_host import hook_host_s, original_params
from scalesim.parallel.fsdp import kept_gathered
from scalesim.program import ComputeTask

UNSHARD_STREAM = "fsdp_unshard"
INFLIGHT_ALL_GATHERS = 2        # fsdp/_limiter_utils.py _FreeEventQueue._max_num_inflight_all_gathers


def _sharded(rp) -> bool:
    """Whether the rank runs PyTorch FSDP with its units sharded over more than itself."""
    plan = rp.plan
    return plan.fsdp_version is not None and plan.zero >= 3 and len(rp.grad_group) > 1


def unsharding(rp, work, kind: str, dep: int | None) -> int | None:
    """The unit's unshard hook before its `kind` pass's all-gather, which waits for what it returns
    (`dep`, the gather-ahead point, when there is no hook to play)."""
    if not _sharded(rp):
        return dep
    plan = rp.plan
    hook = "forward" if kind == "forward" else "pre_backward"
    host_s = hook_host_s(plan.fsdp_version, original_params(work.layer), hook, plan.host_dispatch_s)
    freed = None
    if plan.fsdp_version == 1 and len(rp.free_events) >= INFLIGHT_ALL_GATHERS:
        freed = rp.free_events.pop(0)
    if host_s <= 0 and freed is None:
        return dep
    deps = tuple(d for d in (dep, freed) if d is not None)
    rp.list.append(ComputeTask(f"fsdp {'rate limiter, ' if freed is not None else ''}{hook} hooks", "other", 0.0,
                               deps=deps, stream=UNSHARD_STREAM, host_s=host_s,
                               host_sync=freed is not None and plan.host_dispatch_s > 0))
    return len(rp.list) - 1


def resharded(rp, work, kind: str, dep: int | None) -> int | None:
    """After a unit's `kind` pass ended with task `dep`: FSDP1 queues the free event of a unit it
    reshards then (every unit after its backward, the blocks FSDP reshards after forward); returns `dep`."""
    if dep is None or not _sharded(rp) or rp.plan.fsdp_version != 1:
        return dep
    if kind != "forward" or not kept_gathered(rp, work):
        rp.free_events.append(dep)
    return dep
