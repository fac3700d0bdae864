"""Where a rank's host thread spends its CPU time in a step, by cause, read from its program: what
`run --json`'s `host` carries so that a report can say what would cut host-bound time without the engine.

Causes (the tasks' `host_s`, costs/host.py, costs/fsdp_host.py, costs/coalesced.py):
- `layer_kernels`: launching the layers' forward, backward and recompute kernels one by one, the
  time `training.cuda_graphs` shrinks (parallel/builder.py: graphs replace the layers' launches only);
- `fsdp`: PyTorch FSDP's hooks and the copy and cast kernels it issues itself (tasks named "fsdp...":
  parallel/fsdp.py, parallel/fsdp_limiter.py), which CUDA graphs do not capture;
- `other`: the rest (optimizer step, DDP/ZeRO gradient hooks, collective calls, copies).
Blocking syncs (`host_sync` tasks: the host waits for the GPU) are counted apart, FSDP1's rate-limiter
waits (`limit_all_gathers`) on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LAYER_KINDS = frozenset(("forward", "backward", "recompute"))
FSDP_PREFIX = "fsdp"                 # parallel/fsdp.py, fsdp_limiter.py name every task they add so
RATE_LIMITER = "rate limiter"        # parallel/fsdp_limiter.py: the unshard that blocks on a free event


def host_causes(tasks: Iterable, cuda_graphs: bool, fsdp_version: int | None) -> dict[str, Any]:
    """The host's CPU time per step by cause and its blocking syncs, for one rank's `tasks` (program
    order), with the plan's flags a report needs to say what would help.

    >>> from scalesim.program import ComputeTask
    >>> tasks = [ComputeTask("fwd block 0", "forward", 1e-3, host_s=2e-5),
    ...          ComputeTask("fsdp rate limiter, forward hooks", "other", 0.0, host_s=1e-5, host_sync=True),
    ...          ComputeTask("optimizer", "optimizer", 1e-3, host_s=5e-6)]
    >>> h = host_causes(tasks, False, 1)
    >>> h["cpu_s"] == {"layer_kernels": 2e-5, "fsdp": 1e-5, "other": 5e-6}, h["blocking_syncs"]
    (True, {'fsdp_rate_limiter': 1, 'other': 0})
    """
    layer = fsdp = other = 0.0
    limiter = syncs = 0
    for task in tasks:
        is_fsdp = task.name.startswith(FSDP_PREFIX)
        if task.host_s:
            if is_fsdp:
                fsdp += task.host_s
            elif task.kind in LAYER_KINDS:
                layer += task.host_s
            else:
                other += task.host_s
        if task.host_sync:
            if is_fsdp and RATE_LIMITER in task.name:
                limiter += 1
            else:
                syncs += 1
    return {"cuda_graphs": cuda_graphs, "fsdp_version": fsdp_version,
            "cpu_s": {"layer_kernels": layer, "fsdp": fsdp, "other": other},
            "blocking_syncs": {"fsdp_rate_limiter": limiter, "other": syncs}}
