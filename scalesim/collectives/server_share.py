"""A collective plan whose traffic between servers is a share of what it was.

For dispatchers that send a token across the network once per destination server and
fan it out over NVLink there (DeepEP's internode kernels, scalesim/parallel/experts.py
`network_share`): the plan of the all-to-all of every rank copy keeps its NVLink legs,
and each flow from one server to another carries `share` of its bytes.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.collectives.plan import CollectivePlan, Phase
from scalesim.topology import Topology


def scale_between_servers(plan: CollectivePlan, topology: Topology, share: float) -> CollectivePlan:
    """`plan` with every flow between two servers carrying `share` of its bytes.

    >>> from scalesim.collectives.select import plan_collective
    >>> from scalesim.topology import build_cluster, load_node_design
    >>> from scalesim.topology.cluster import Fabric
    >>> t = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    >>> plan = plan_collective("all_to_all", t, tuple(range(16)), 16e6)
    >>> half = scale_between_servers(plan, t, 0.5)
    >>> round(plan.bytes_sent - half.bytes_sent) == round(sum(
    ...     f.size_bytes for p in plan.phases for f in p.flows if f.src[:f.src.index('/')] != f.dst[:f.dst.index('/')]) / 2)
    True
    """
    if share == 1.0:
        return plan
    server = {topology.node_of(r): topology.server_of(r) for r in plan.ranks}
    phases = tuple(Phase(p.latency_s, tuple(
        replace(f, size_bytes=f.size_bytes * share) if server.get(f.src, -1) != server.get(f.dst, -1) else f
        for f in p.flows)) for p in plan.phases)
    return replace(plan, phases=phases)
