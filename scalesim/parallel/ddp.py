"""Data parallelism as PyTorch DistributedDataParallel runs it.

Gradients are grouped into buckets in reverse layer order (the order backward
produces them); the first bucket is capped at 1 MiB and the others at
`bucket_mb` MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES and
bucket_cap_mb=25). A bucket's all-reduce is launched on the communication
stream as soon as the backward of the last layer that fills it finishes, so it
overlaps the rest of backward. With gradient accumulation (global batch >
dp x micro-batch) the reduction happens on the last micro-step only
(`no_sync()` on the others). The optimizer step waits for every bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.collectives import plan_collective
from scalesim.costs.compute import layer_time, optimizer_time_s
from scalesim.costs.memory import state_bytes_per_param
from scalesim.hardware import GpuSpec
from scalesim.models.spec import ModelSpec
from scalesim.program import CollectiveTask, ComputeTask, Program
from scalesim.topology import Topology

FIRST_BUCKET_BYTES = 1 * 2**20


@dataclass(frozen=True, slots=True)
class DdpPlan:
    ranks: tuple[int, ...]          # GPUs in the data-parallel group, in ring order
    micro_batch: int
    accumulation_steps: int         # micro-steps per optimizer step
    precision: str
    optimizer: str
    checkpointing: str
    bucket_bytes: float
    overlap_grad_reduce: bool
    attention: str = "flash"


def ddp_buckets(grad_bytes_per_layer: list[float], bucket_bytes: float,
                first_bucket_bytes: float = FIRST_BUCKET_BYTES) -> list[tuple[float, int]]:
    """Buckets as (bytes, index of the layer whose backward completes it), in backward order.

    `grad_bytes_per_layer` is in backward order. A layer larger than the space
    left is split across buckets (its parameter tensors go to several), and
    all of them are ready when its backward ends.

    >>> ddp_buckets([3.0, 3.0, 3.0], bucket_bytes=4.0, first_bucket_bytes=2.0)
    [(2.0, 0), (4.0, 1), (3.0, 2)]
    """
    buckets: list[tuple[float, int]] = []
    cap = first_bucket_bytes
    filled = 0.0
    for index, size in enumerate(grad_bytes_per_layer):
        left = size
        while left > 0:
            take = min(left, cap - filled)
            filled += take
            left -= take
            if filled >= cap:
                buckets.append((filled, index))
                filled = 0.0
                cap = bucket_bytes
        if filled > 0 and index == len(grad_bytes_per_layer) - 1:
            buckets.append((filled, index))
    return buckets


def build_ddp_program(model: ModelSpec, gpu: GpuSpec, topology: Topology, plan: DdpPlan) -> Program:
    """Per-rank tasks of one optimizer step; every rank runs the same program."""
    times = [layer_time(layer, gpu, plan.precision, plan.micro_batch, plan.checkpointing, plan.attention)
             for layer in model.layers]
    _, grad_bytes_per_param, _ = state_bytes_per_param(plan.precision, plan.optimizer)
    backward_order = list(range(len(model.layers)))[::-1]
    grads = [model.layers[i].params * grad_bytes_per_param for i in backward_order]
    buckets = ddp_buckets(grads, plan.bucket_bytes)
    n = len(plan.ranks)

    tasks: list = []
    last = None

    def add(task) -> int:
        tasks.append(task)
        return len(tasks) - 1

    reductions: list[int] = []

    def reduce(size: float) -> None:
        index = len(reductions)
        collective = plan_collective("all_reduce", topology, plan.ranks, size)
        reductions.append(add(CollectiveTask(f"all_reduce bucket {index}", f"ddp/b{index}",
                                             collective, deps=(last,))))

    for step in range(plan.accumulation_steps):
        final = step == plan.accumulation_steps - 1
        for i, layer in enumerate(model.layers):
            last = add(ComputeTask(f"fwd {layer.name}", "forward", times[i].forward_s,
                                   deps=() if last is None else (last,), flop=times[i].forward_flop))
        pending = list(buckets) if final and n > 1 else []
        for position, i in enumerate(backward_order):
            layer = model.layers[i]
            if times[i].recompute_s > 0:
                last = add(ComputeTask(f"recompute {layer.name}", "recompute", times[i].recompute_s,
                                       deps=(last,), flop=times[i].forward_flop))
            last = add(ComputeTask(f"bwd {layer.name}", "backward", times[i].backward_s, deps=(last,),
                                   flop=2 * times[i].forward_flop))
            # A bucket is reduced once the layer that completes it is done, or,
            # without overlap, after the whole backward.
            while plan.overlap_grad_reduce and pending and pending[0][1] == position:
                reduce(pending.pop(0)[0])
        for size, _ in pending:
            reduce(size)
    add(ComputeTask("optimizer step", "optimizer",
                    optimizer_time_s(model.params, gpu, plan.precision, plan.optimizer),
                    deps=(last, *reductions)))
    program_tasks = tuple(tasks)
    return Program({rank: program_tasks for rank in plan.ranks},
                   topology.capacity_bytes_per_s, topology.resource_names)
