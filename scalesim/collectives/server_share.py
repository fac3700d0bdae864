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
    >>> between = lambda p: sum(f.size_bytes for ph in p.phases for f in ph.flows
    ...                         if t.graph.nodes[f.src]["server"] != t.graph.nodes[f.dst]["server"])
    >>> between(half) == between(plan) / 2 > 0 and plan.bytes_sent - between(plan) == half.bytes_sent - between(half)
    True
    """
    if share == 1.0:
        return plan
    nodes = topology.graph.nodes          # flows of the group's symmetric copies too, not only plan.ranks'
    phases = tuple(Phase(p.latency_s, tuple(
        replace(f, size_bytes=f.size_bytes * share) if nodes[f.src]["server"] != nodes[f.dst]["server"] else f
        for f in p.flows)) for p in plan.phases)
    return replace(plan, phases=phases)
