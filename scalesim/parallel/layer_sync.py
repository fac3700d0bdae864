"""Megatron-DeepSpeed's host sync in every decoder layer's forward (`training.layer_forward_host_sync`).

Since "MoE support (#48)" (2022-06-07) Megatron-DeepSpeed's ParallelTransformerLayer.forward creates
`moe_loss` and `mlp_bias` as `torch.tensor(0.0, device=...)` on every call, dense models included
(microsoft/Megatron-DeepSpeed @0d6e3793, megatron/model/transformer.py:1337-1338), after the attention,
its bias-dropout-add and the second norm are issued. A CUDA tensor from a Python scalar is a copy from
pageable host memory with non_blocking=False: cudaMemcpyAsync + cudaStreamSynchronize (pytorch/pytorch
#120996: `torch.tensor(3.14, device=dev)` is flagged by set_sync_debug_mode, torch 2.1; #190217: the call
returns only once the queued GPU work is done, torch 2.11). The host waits for the GPU
queue to drain once a layer forward (the second copy finds it empty: two back-to-back syncs cost as one),
so it cannot run ahead across layers. Full recompute re-runs the forward (the sync with it); the backward
runs in autograd's engine, without it. Megatron-LM's layer has no such call. A CUDA-graphed layer cannot
hold a sync (capture refuses it): not applied under `cuda_graphs`.

Modelled as the host waiting for the first part of the block (attention and, under TP, its all-reduce:
the tensor-parallel all-reduce is synchronous, the compute stream waits for it); with the key a block is run
as its two parts at TP 1 too (parallel/builder.py `split`), so the sync sits before the MLP there as well (a
block run whole would sync at its end and queue the next one's GPU time after all of its host time). After the sync the host issues the
two `torch.tensor` calls (one op each, `PRICE["aten"]`) and then the MLP's first kernel (the mlp and fc1
module calls, ColumnParallelLinear's Function, its GEMM: tr.py:162, layers.py:606-658); the GPU starts
then, while the host issues the rest. A task is issued after its whole host time (kernels issued as a lump);
with the host ahead that does not matter, but between syncs it would queue each part's GPU time after all of
its host time. `issue_early` issues each forward compute task after a layer sync once its first kernel is
(one dispatch), moving the rest of its host time onto the task after it: later issue times are unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.nanotron_host import PRICE

SYNCED = " + host sync (torch.tensor)"      # the name suffix of a layer's sync task
TENSOR_CALLS = 2 * PRICE["aten"]            # moe_loss, mlp_bias: dispatches, as a multiple of one op's
FIRST_KERNEL = 2 * PRICE["view"] + PRICE["function"] + PRICE["aten"]   # mlp, fc1 calls; Function; GEMM


def applies(plan, work, kind: str, i: int) -> bool:
    """Whether part `i` of `work` in a `kind` pass ends with the layer forward's host sync."""
    return plan.layer_synced and kind != "backward" and i == 0 and work.layer.kind == "transformer_block"


def mark(program, work, kind: str, i: int, wait: int | None) -> int | None:
    """Where it applies, the host sync after task `wait` (what the rest of the layer waits for after part `i`);
    returns what the rest waits for then. A collective (the TP all-reduce) becomes the sync itself; after a
    compute task (TP 1) a zero-length sync task follows it, so that its kernels can be issued while the GPU
    runs them (`issue_early`) and the sync waits for both."""
    if wait is None or not applies(program.plan, work, kind, i):
        return wait
    task = program.list[wait]
    if task.kind != "comm":
        return program.compute(task.name + SYNCED, task.kind, 0.0, 0.0, deps=(wait,), host_sync=True)
    program.list[wait] = replace(task, host_sync=True, name=task.name + SYNCED)
    return wait


def issue_early(tasks: list, dispatch_s: float) -> None:
    """Between a layer sync and the backward in `tasks`: each compute task is issued once its first kernel
    is (the first one after the sync: once the MLP's first kernel is), the rest of its host time carried to
    the task after it; the torch.tensor calls cost the task right after the sync more, a collective too
    (sequence parallelism's all-gather before fc1) (module docstring)."""
    carrying = tensor_due = first_due = False
    tensor_s = TENSOR_CALLS * dispatch_s
    for k in range(len(tasks) - 1):
        task = tasks[k]
        if task.host_sync or task.kind not in ("forward", "recompute", "comm"):
            carrying = tensor_due = first_due = task.host_sync and task.name.endswith(SYNCED)
            continue
        if not carrying:
            continue
        # the torch.tensor calls go on the task right after the sync, a collective too (sequence parallelism's
        # all-gather before fc1); the MLP's first kernel on the first compute task after it
        extra, tensor_due = (tensor_s if tensor_due else 0.0), False
        if task.kind == "comm":                         # a collective is one call
            if extra:
                tasks[k] = replace(task, host_s=task.host_s + extra)
            continue
        after_sync, first_due = first_due, False
        host_s = task.host_s + extra
        first_s = min(host_s, extra + FIRST_KERNEL * dispatch_s if after_sync else dispatch_s)
        tasks[k] = replace(task, host_s=first_s)
        tasks[k + 1] = replace(tasks[k + 1], host_s=tasks[k + 1].host_s + host_s - first_s)
