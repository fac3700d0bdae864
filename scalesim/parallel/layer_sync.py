"""Megatron-DeepSpeed's host sync in every decoder layer's forward (`training.layer_forward_host_sync`).

Since "MoE support (#48)" (2022-06-07) Megatron-DeepSpeed's ParallelTransformerLayer.forward creates
`moe_loss` and `mlp_bias` as `torch.tensor(0.0, device=...)` on every call, dense models included
(microsoft/Megatron-DeepSpeed @0d6e3793, megatron/model/transformer.py:1337-1338), after the attention,
its bias-dropout-add and the second norm are issued. A CUDA tensor from a Python scalar is a copy from
pageable host memory with non_blocking=False: cudaMemcpyAsync + cudaStreamSynchronize (pytorch/pytorch
#120996: `torch.tensor(3.14, device=dev)` is flagged by set_sync_debug_mode). The host waits for the GPU
queue to drain once a layer forward (the second copy finds it empty: two back-to-back syncs cost as one),
so it cannot run ahead across layers. Full recompute re-runs the forward (the sync with it); the backward
runs in autograd's engine, without it. Megatron-LM's layer has no such call.

Modelled as the host waiting for the first part of the block (attention and, under TP, its all-reduce:
the tensor-parallel all-reduce is synchronous, the compute stream waits for it); a block run whole
(TP 1, no CP) syncs at its end, the same one sync per layer forward.
"""

from __future__ import annotations

from dataclasses import replace


def applies(plan, work, kind: str, i: int) -> bool:
    """Whether part `i` of `work` in a `kind` pass ends with the layer forward's host sync."""
    return (plan.layer_forward_host_sync and plan.host_dispatch_s > 0 and kind != "backward"
            and i == 0 and work.layer.kind == "transformer_block")


def mark(program, work, kind: str, i: int, wait: int | None) -> None:
    """Make task `wait` (what the rest of the layer waits for after part `i`) a host sync when it applies."""
    if wait is not None and applies(program.plan, work, kind, i) and not program.list[wait].host_sync:
        program.list[wait] = replace(program.list[wait], host_sync=True)
