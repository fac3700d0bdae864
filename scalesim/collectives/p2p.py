"""Point-to-point patterns: all-to-all, nccl-tests' send/recv, and a single send.

NCCL runs all-to-all as grouped sends and receives to every peer at once
("direct"); each rank sends S/N to each other rank (nccl-tests alltoall_perf,
where S is the per-rank buffer). Across servers whose GPUs are NVLink peers,
those sends go through PXN (`collectives/pxn.py`): over NVLink to the GPU on
the destination's NIC rail, then over the network, aggregated. nccl-tests' sendrecv has every rank send S to
the next rank and receive S from the previous one. A pipeline-parallel
activation transfer is a single send of S from one rank to another.
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan, Phase
from scalesim.collectives.protocol import bandwidth_fraction, base_latency_s, step_latency_s
from scalesim.collectives.pxn import pxn_pairs
from scalesim.collectives.ring import flow
from scalesim.topology import Topology


def _latency(topology: Topology, pairs: list[tuple[int, int]], protocol: str) -> float:
    classes = {topology.link_class(a, b) for a, b in pairs}
    worst = "net" if "net" in classes else ("pci" if "pci" in classes else "nvlink")
    return base_latency_s("ring", protocol) + step_latency_s(worst, "ring", protocol)


def p2p_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
             protocol: str = "simple") -> CollectivePlan:
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(op, "direct", tuple(ranks), size_bytes, ())
    multi_node = len(topology.ranks_by_server(tuple(ranks))) > 1
    scale = 1 / bandwidth_fraction("ring", protocol, op, multi_node)
    if op == "all_to_all":
        routed = pxn_pairs(topology, tuple(ranks), size_bytes / n * scale) if multi_node else None
        if routed is not None:
            flows = tuple(flow(topology, a, b, size) for (a, b), size in routed.items())
            return CollectivePlan(op, "direct", tuple(ranks), size_bytes,
                                  (Phase(_latency(topology, list(routed), protocol), flows),), protocol)
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        part = size_bytes / n
    elif op == "send_recv":
        pairs = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)] if n > 2 else [(ranks[0], ranks[1]), (ranks[1], ranks[0])]
        part = size_bytes
    elif op == "send":
        pairs = [(ranks[0], ranks[1])]
        part = size_bytes
    else:
        raise ValueError(f"no point-to-point pattern for {op}")
    flows = tuple(flow(topology, a, b, part * scale) for a, b in pairs)
    return CollectivePlan(op, "direct", tuple(ranks), size_bytes,
                          (Phase(_latency(topology, pairs, protocol), flows),), protocol)
