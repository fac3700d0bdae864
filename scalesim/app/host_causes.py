"""Where a rank's host thread spends its CPU time in a step, by cause, read from its program: what
`run --json`'s `host` carries so that a report can say what would cut host-bound time without the engine.

Causes (the tasks' `host_s`, costs/host.py, costs/fsdp_host.py, costs/coalesced.py):
- `layer_kernels`: launching the layers' forward, backward and recompute kernels one by one, the
  time `training.cuda_graphs` shrinks (parallel/builder.py: graphs replace the layers' launches only),
  except in the parts of dropless MoE layers that run eagerly even with graphs (the experts and the
  combine, whose token counts the host reads every step: costs/host.py outside_cuda_graphs); that
  part is also given apart, as `layer_kernels_outside_graphs_s`;
- `fsdp`: PyTorch FSDP's hooks and the copy and cast kernels it issues itself (tasks named "fsdp...":
  parallel/fsdp.py, parallel/fsdp_limiter.py), which CUDA graphs do not capture;
- `other`: the rest (optimizer step, DDP/ZeRO gradient hooks, collective calls, copies).
Blocking syncs (`host_sync` tasks: the host waits for the GPU) are counted apart, FSDP1's rate-limiter
waits (`limit_all_gathers`) on their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scalesim.costs.host import outside_cuda_graphs
from scalesim.models.spec import ModelSpec
from scalesim.parallel.sharding import split_moe

LAYER_KINDS = frozenset(("forward", "backward", "recompute"))
FSDP_PREFIX = "fsdp"                 # parallel/fsdp.py, fsdp_limiter.py name every task they add so
RATE_LIMITER = "rate limiter"        # parallel/fsdp_limiter.py: the unshard that blocks on a free event


def eager_parts(model: ModelSpec) -> frozenset[str]:
    """Names of the layer parts that run eagerly even with `training.cuda_graphs` (the builder's
    `outside_cuda_graphs` on split_moe's parts, named as the rank program names their tasks).

    >>> from scalesim.models import get_model
    >>> sorted(eager_parts(get_model("mixtral-8x7b", seq_len=64)))[:2], eager_parts(get_model("llama2-7b", seq_len=64))
    (['block0.2', 'block0.3'], frozenset())
    """
    moe = model.moe
    if moe is None:
        return frozenset()
    return frozenset(f"{layer.name}.{i}" for layer in model.layers if layer.expert_params > 0
                     for i, part in enumerate(split_moe(layer)) if outside_cuda_graphs(part, moe.capacity_factor))


def host_causes(tasks: Iterable, cuda_graphs: bool, fsdp_version: int | None,
                eager: frozenset[str] = frozenset(), graphs_blocked_by: str | None = None) -> dict[str, Any]:
    """The host's CPU time per step by cause and its blocking syncs, for one rank's `tasks` (program
    order), with the plan's flags a report needs to say what would help (`graphs_blocked_by`: what in
    the plan keeps CUDA graphs from capturing its layers, scenario/graphs.py).

    >>> from scalesim.program import ComputeTask
    >>> tasks = [ComputeTask("fwd block 0", "forward", 1e-3, host_s=2e-5),
    ...          ComputeTask("fsdp rate limiter, forward hooks", "other", 0.0, host_s=1e-5, host_sync=True),
    ...          ComputeTask("optimizer", "optimizer", 1e-3, host_s=5e-6)]
    >>> h = host_causes(tasks, False, 1)
    >>> h["cpu_s"] == {"layer_kernels": 2e-5, "fsdp": 1e-5, "other": 5e-6}, h["blocking_syncs"]
    (True, {'fsdp_rate_limiter': 1, 'other': 0})
    """
    cpu = {"layer_kernels": 0.0, "fsdp": 0.0, "other": 0.0}
    outside = 0.0
    limiter = syncs = 0
    for task in tasks:
        cause = task_cause(task)
        if task.host_s:
            cpu[cause] += task.host_s
            if cause == "layer_kernels" and eager and part_name(task.name) in eager:
                outside += task.host_s
        if task.host_sync:
            if cause == "fsdp" and RATE_LIMITER in task.name:
                limiter += 1
            else:
                syncs += 1
    return {"cuda_graphs": cuda_graphs, "fsdp_version": fsdp_version, "cuda_graphs_blocked_by": graphs_blocked_by,
            "cpu_s": cpu,
            "layer_kernels_outside_graphs_s": outside,
            "blocking_syncs": {"fsdp_rate_limiter": limiter, "other": syncs}}


def task_cause(task) -> str:
    """The cause a task's host time goes to, by how the builder names and kinds it: "fsdp" for the tasks
    parallel/fsdp.py and fsdp_limiter.py add (all named "fsdp..."), "layer_kernels" for a layer's forward,
    backward and recompute, "other" for the rest. Names are the builder's contract with this module:
    tests/app/test_host_cause_names.py fails if a task the builder makes for FSDP or MoE steps is renamed
    out of its cause."""
    if task.name.startswith(FSDP_PREFIX):
        return "fsdp"
    return "layer_kernels" if task.kind in LAYER_KINDS else "other"


def part_name(task_name: str) -> str:
    """The layer part a layer task runs: "fwd block0.2 + token-count sync" -> "block0.2"
    (parallel/rank_program.py run_layer)."""
    words = task_name.split(" ", 2)
    return words[1] if len(words) > 1 else ""
