"""Copies between a GPU and its socket's host memory: ZeRO-Offload's and ZeRO-Infinity's traffic.

ZeRO-Offload (Ren et al. 2021) moves gradients to the host and updated
weights back once per step. ZeRO-Infinity (Rajbhandari et al. 2021, sec. 5)
and FSDP's CPUOffload(offload_params=True) keep the weights themselves in host
memory and copy each layer's (or each rank's shard of it) to the GPU before
every use: every forward and every backward (and recompute) of every
micro-batch. The copies are flows on the topology's real route from the
socket's memory through the CPU and PCIe switches to the GPU, so they share
PCIe lanes and host memory bandwidth with the other GPUs' copies and with
host-staged collectives.
"""

from __future__ import annotations

from scalesim.collectives import CollectivePlan, Flow, Phase
from scalesim.costs.optimizer import optimizer_bytes_per_param
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import Topology


def movers(topology: Topology, rank: int, size: int, symmetric: bool) -> list[int]:
    """The ranks whose copies run at once with `rank`'s: simulated once per stage, a symmetric
    rank stands for every GPU of its server (they share PCIe switches and host memory)."""
    if not symmetric:
        return [rank]
    server = topology.server_of(rank)
    return [r for r in range(size) if topology.server_of(r) == server]


def host_copy_plan(topology: Topology, rank: int, ranks: list[int], size_bytes: float,
                   to_host: bool, memo: dict) -> CollectivePlan:
    """One copy of `size_bytes` per rank in `ranks`, GPU to host (`to_host`) or back, as one call of `rank`.

    Kept in `memo` (the caller's, per topology): offloaded weights make one such copy per layer
    and pass, and identical layers give identical plans."""
    key = ("host-copy", rank, tuple(ranks), size_bytes, to_host)
    if key not in memo:
        src, dst = ("gpu", "host") if to_host else ("host", "gpu")
        flows = tuple(Flow(src, dst, topology.host_route(r, to_host), size_bytes) for r in ranks)
        memo[key] = CollectivePlan("offload", "direct", (rank,), size_bytes, (Phase(0.0, flows),))
    return memo[key]


def offloaded_step(builder, tasks: list, rank: int, params: float, deps: tuple[int, ...]) -> int:
    """ZeRO-Offload (Ren et al. 2021): gradients to host memory, the update on the CPU, weights back.

    The copies are flows from the GPU to its socket's memory and back, so
    they share PCIe and host memory with everything else. The CPU Adam
    update streams the same bytes per parameter as on the GPU
    (`optimizer_bytes_per_param`), from the socket's memory, shared by the GPUs of
    the socket (memory-bound, as DeepSpeed's vectorised CPU Adam is).
    """
    topo = builder.topology
    # Simulated once per stage, a rank's copies stand for the whole server's
    # (they share PCIe switches and host memory), so all of them are on the links.
    ranks = movers(topo, rank, builder.plan.placement.size, builder.symmetric)
    down = host_copy_plan(topo, rank, ranks, params * builder.grad_bytes_per_param, True, builder.memo)
    tasks.append(CollectiveTask("grads to host", f"offload/d2h/{rank}", down, deps=deps, stream="offload"))
    d2h = len(tasks) - 1
    share = topo.host_memory_bw_bytes_per_s(rank) / topo.gpus_per_socket()
    cpu_s = params * optimizer_bytes_per_param(builder.plan.precision, builder.plan.optimizer) / share
    tasks.append(ComputeTask("CPU optimizer step", "optimizer", cpu_s, deps=(d2h,), stream="cpu"))
    cpu = len(tasks) - 1
    if builder.plan.offload_params:     # the updated weights stay on the host, fetched at their next use
        return cpu
    up = host_copy_plan(topo, rank, ranks, params * builder.weight_bytes_per_param, False, builder.memo)
    tasks.append(CollectiveTask("weights to GPU", f"offload/h2d/{rank}", up, deps=(cpu,), stream="offload"))
    return len(tasks) - 1
