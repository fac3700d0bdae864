"""Hierarchical all-reduce for groups spanning servers (Horovod, BlueConnect, Megatron-style).

Three phases, one after the other: a reduce-scatter ring inside every server
(all servers at once), an all-reduce ring across servers among the GPUs with
the same local index (k rings at once, each on its GPU's own NIC, each on
S/k bytes), and an all-gather ring inside every server.
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan, Phase
from scalesim.collectives.ring import ring_plan
from scalesim.topology import Topology


def hierarchical_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
                      protocol: str = "simple") -> CollectivePlan:
    servers = topology.ranks_by_server(tuple(ranks))
    k = len(servers[0])
    if op != "all_reduce" or len(servers) < 2 or any(len(s) != k for s in servers):
        raise ValueError("hierarchical needs an all_reduce over servers with equal GPU counts")

    def merged(plans) -> Phase:
        plans = [p for p in plans if p.phases]
        flows = tuple(f for p in plans for f in p.phases[0].flows)
        return Phase(max((p.phases[0].latency_s for p in plans), default=0.0), flows)

    phases = [
        merged(ring_plan("reduce_scatter", topology, tuple(s), size_bytes, protocol) for s in servers),
        merged(ring_plan("all_reduce", topology, tuple(s[i] for s in servers), size_bytes / k, protocol)
               for i in range(k)),
        merged(ring_plan("all_gather", topology, tuple(s), size_bytes, protocol) for s in servers),
    ]
    phases = tuple(p for p in phases if p.flows)
    return CollectivePlan(op, "hierarchical", tuple(ranks), size_bytes, phases, protocol)
