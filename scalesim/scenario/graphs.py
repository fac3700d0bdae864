"""Which plans can launch their layers as CUDA graphs (`training.cuda_graphs`).

A CUDA graph replays the same kernels on the same memory addresses, with no host work inside it
(PyTorch's notes on CUDA graphs: "every replay reads from and writes to the same (virtual) memory
addresses", no CPU syncs, pytorch/pytorch#63269). ZeRO-3 gathers each unit's parameters into memory
it frees again after use, from hooks around every module:
- PyTorch FSDP1 (FullyShardedDataParallel): capture fails even on a two-linear network
  (pytorch/pytorch#127225, open); its hooks allocate and free each unit's gathered parameters, and its rate
  limiter (limit_all_gathers, the default) blocks the CPU on CUDA events (`event.synchronize()`,
  parallel/fsdp_limiter.py), which capture forbids; refused.
- DeepSpeed ZeRO-3 (zero 3 without fsdp_version): "as ZeRO3 repeats gathering and discarding memory for
  sharded parameters, it cannot run with CUDA graphs" (DeepSpeed maintainer, deepspeedai/DeepSpeed#6552); refused.
- PyTorch FSDP2 (fully_shard): torch.cuda.make_graphed_callables refuses modules with hooks
  (pytorch/pytorch#164264), but torch.compile with mode="reduce-overhead" on each block leaves FSDP2's hooks
  and collectives outside the compiled regions and replays each block as CUDA graphs (ByteDance-Seed/VeOmni#881:
  inductor, reduce-overhead, FSDP2 on 2x H100, 7% shorter steps). That is what scalesim models: the layers'
  launches graphed, FSDP2's hooks eager (parallel/builder.py). Capturing the whole step (torchtitan#3559,
  reshard_after_forward default or never) would take FSDP2's hooks into the graph too, which is not modelled.
"""

from __future__ import annotations

FSDP1_ISSUE = "pytorch/pytorch#127225"
ZERO3_ISSUE = "deepspeedai/DeepSpeed#6552"
FSDP2_WAY = ("FSDP2 (parallel.fsdp_version: 2) with each block under torch.compile(mode=\"reduce-overhead\"), "
             "its hooks outside the graphs")


def graphs_blocked_by(zero: int, fsdp_version: int | None) -> str | None:
    """What in the plan keeps CUDA graphs from capturing the layers, or None when they can.

    >>> graphs_blocked_by(3, 1), graphs_blocked_by(3, None), graphs_blocked_by(3, 2), graphs_blocked_by(1, None)
    ('PyTorch FSDP1', 'DeepSpeed ZeRO-3', None, None)
    """
    if zero != 3 or fsdp_version == 2:
        return None
    return "PyTorch FSDP1" if fsdp_version == 1 else "DeepSpeed ZeRO-3"


def graphs_refusal(zero: int, fsdp_version: int | None) -> str | None:
    """Why `training.cuda_graphs: true` cannot run with this ZeRO stage and FSDP version (None: it can)."""
    blocker = graphs_blocked_by(zero, fsdp_version)
    if blocker is None:
        return None
    why = (f"its hooks gather and free each unit's parameters and its rate limiter blocks the CPU on CUDA events; "
           f"capture fails even on a two-layer network ({FSDP1_ISSUE})" if fsdp_version == 1
           else f"it gathers and frees each layer's parameters every step, and a graph replays fixed addresses "
                f"({ZERO3_ISSUE})")
    return (f"CUDA graphs cannot capture {blocker}'s layers: {why}. Allowed with parallel.zero 3 and fsdp_version "
            f"{fsdp_version if fsdp_version is not None else 'null'}: false; or {FSDP2_WAY}")


def graphs_cleared(zero: int, fsdp_version: int | None) -> dict[str, bool]:
    """`training.cuda_graphs` switched off for a plan whose ZeRO-3 they cannot capture, as a search or a
    what-if runs it (app/plans.py scenario_for, app/fitting.py); {} when the plan keeps them."""
    return {} if graphs_blocked_by(zero, fsdp_version) is None else {"cuda_graphs": False}
