"""A cluster: one or more copies of a node design, optionally truncated to fewer GPUs."""

from __future__ import annotations

from scalesim.errors import InputError
from scalesim.topology.build import build_node_graph
from scalesim.topology.design import NodeDesign
from scalesim.topology.topology import Topology


def build_cluster(design: NodeDesign, *, nodes: int = 1) -> Topology:
    """The cluster's topology. Multi-node fabrics arrive with the multi-node issue."""
    if nodes != 1:
        raise InputError("multi-node clusters are not supported yet; use nodes: 1", key="cluster.nodes")
    return Topology(build_node_graph(design), design.name)
