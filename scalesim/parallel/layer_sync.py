"""Megatron-DeepSpeed's host sync in every decoder layer's forward (`training.layer_forward_host_sync`).

Since "MoE support (#48)" (2022-06-07) Megatron-DeepSpeed's ParallelTransformerLayer.forward creates
`moe_loss` and `mlp_bias` as `torch.tensor(0.0, device=...)` on every call, dense models included
(microsoft/Megatron-DeepSpeed @0d6e3793, megatron/model/transformer.py:1337-1338), after the attention,
its bias-dropout-add and the second norm are issued. A CUDA tensor from a Python scalar is a copy from
pageable host memory with non_blocking=False: cudaMemcpyAsync + cudaStreamSynchronize (pytorch/pytorch
#120996: `torch.tensor(3.14, device=dev)` is flagged by set_sync_debug_mode). The host waits for the GPU
queue to drain once a layer forward (the second copy finds it empty: two back-to-back syncs cost as one),
so it cannot run ahead across layers. Full recompute re-runs the forward (the sync with it); the backward
runs in autograd's engine, without it. Megatron-LM's layer has no such call. A CUDA-graphed layer cannot
hold a sync (capture refuses it): not applied under `cuda_graphs`.

Modelled as the host waiting for the first part of the block (attention and, under TP, its all-reduce:
the tensor-parallel all-reduce is synchronous, the compute stream waits for it); a block run whole
(TP 1, no CP) syncs at its end, the same one sync per layer forward. After the sync the host issues the
two `torch.tensor` calls (one op each, `PRICE["aten"]`) and then the MLP's first kernel (the mlp and fc1
module calls, ColumnParallelLinear's Function, its GEMM: tr.py:162, layers.py:606-658); the GPU starts
then, while the host issues the rest. A task is issued after its whole host time, so `issue_early` moves
the rest of that task's host time onto the task after it: the host's later issue times are unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.nanotron_host import PRICE

SYNCED = " + host sync (torch.tensor)"      # the name suffix of a layer's sync task
TENSOR_CALLS = 2 * PRICE["aten"]            # moe_loss, mlp_bias: dispatches, as a multiple of one op's
FIRST_KERNEL = 2 * PRICE["view"] + PRICE["function"] + PRICE["aten"]   # mlp, fc1 calls; Function; GEMM


def applies(plan, work, kind: str, i: int) -> bool:
    """Whether part `i` of `work` in a `kind` pass ends with the layer forward's host sync."""
    return (plan.layer_forward_host_sync and plan.host_dispatch_s > 0 and not plan.cuda_graphs
            and kind != "backward" and i == 0 and work.layer.kind == "transformer_block")


def mark(program, work, kind: str, i: int, wait: int | None) -> None:
    """Make task `wait` (what the rest of the layer waits for after part `i`) a host sync when it applies."""
    if wait is not None and applies(program.plan, work, kind, i):
        task = program.list[wait]
        program.list[wait] = replace(task, host_sync=True, name=task.name + SYNCED)


def issue_early(tasks: list, dispatch_s: float) -> None:
    """After each layer sync in `tasks`: the next task costs the `torch.tensor` calls more host time and
    is issued once its first kernel is (module docstring); the rest of its host time goes to the task after."""
    for k in range(1, len(tasks) - 1):
        if tasks[k - 1].host_sync and tasks[k - 1].name.endswith(SYNCED):
            task, after = tasks[k], tasks[k + 1]
            host_s = task.host_s + TENSOR_CALLS * dispatch_s
            first_s = min(host_s, (TENSOR_CALLS + FIRST_KERNEL) * dispatch_s)
            tasks[k] = replace(task, host_s=first_s)
            tasks[k + 1] = replace(after, host_s=after.host_s + host_s - first_s)
