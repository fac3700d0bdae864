"""A cluster: copies of a node design joined by a network fabric.

Fabrics (between nodes; NIC links from the catalog):

- single-switch: every NIC on one switch.
- rail-optimized: NIC k of every node on leaf switch k ("rail" k); rails
  joined by a spine.
- fat-tree: NICs fill leaf switches of `LEAF_DOWNLINKS` ports in node order;
  leaves joined by a spine.

The spine layer is modelled as one switch with one aggregated uplink per leaf
of (downlinks / oversubscription) x NIC bandwidth: with ECMP spreading flows
over equal spines this is the capacity the leaf really has towards the rest
of the fabric (a documented reduction; per-spine hot spots are not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import networkx as nx

from scalesim.errors import InputError
from scalesim.hardware import LinkSpec
from scalesim.hardware.user_catalog import Catalog, builtin_catalog
from scalesim.limits import SCENARIO_LIMITS, check_cluster_size, check_time, check_value
from scalesim.topology.build import add_node_copy, build_node_graph
from scalesim.topology.design import NodeDesign
from scalesim.topology.topology import Topology

FABRICS = ("fat-tree", "rail-optimized", "single-switch")
NETWORK_KINDS = ("infiniband", "roce", "ethernet")
# Half the ports of a 64-port leaf (e.g. NVIDIA Quantum-2 QM9700, 64 x NDR 400G)
# face the NICs, half the spines, in a non-blocking two-tier fat-tree.
LEAF_DOWNLINKS = 32


@dataclass(frozen=True, slots=True)
class Fabric:
    link: str                     # catalog network link of each NIC port
    nics_per_node: int = 8
    kind: str = "fat-tree"
    oversubscription: float = 1.0
    nics_given: bool = True       # the user chose nics_per_node (False: a default, not checked against the node)


def _aggregate(link: LinkSpec, ports: float) -> LinkSpec:
    return replace(link, name=f"{link.name} x{ports:g}", bw_bytes_per_s=link.bw_bytes_per_s * ports)


def _fabric_graph(g: nx.Graph, nic_names: list[list[str]], fabric: Fabric, link: LinkSpec) -> None:
    """Add the switches and cables of the fabric to `g` (NICs already in it)."""
    def switch(name: str) -> str:
        g.add_node(name, kind="fabric_switch", server=-1)
        return name

    all_nics = [nic for node in nic_names for nic in node]
    if fabric.kind == "single-switch" or len(all_nics) <= LEAF_DOWNLINKS and fabric.kind == "fat-tree":
        sw = switch("fabric/switch")
        for nic in all_nics:
            g.add_edge(nic, sw, link=link, duplex=True)
        return
    spine = switch("fabric/spine")
    if fabric.kind == "rail-optimized":
        groups = [[node[k] for node in nic_names if k < len(node)] for k in range(max(map(len, nic_names)))]
        prefix = "fabric/rail"
    else:
        groups = [all_nics[i:i + LEAF_DOWNLINKS] for i in range(0, len(all_nics), LEAF_DOWNLINKS)]
        prefix = "fabric/leaf"
    for k, members in enumerate(groups):
        leaf = switch(f"{prefix}{k}")
        for nic in members:
            g.add_edge(nic, leaf, link=link, duplex=True)
        g.add_edge(leaf, spine, link=_aggregate(link, len(members) / fabric.oversubscription), duplex=True)


def _fabric_link(fabric: Fabric, catalog: Catalog) -> LinkSpec:
    check_value("cluster.fabric.nics_per_node", fabric.nics_per_node, SCENARIO_LIMITS["cluster.fabric.nics_per_node"])
    if fabric.kind not in FABRICS:
        raise InputError(f"unknown fabric topology '{fabric.kind}'; allowed: {', '.join(FABRICS)}",
                         key="cluster.fabric.topology")
    link = catalog.link(fabric.link, key="cluster.fabric.link")
    if link.kind not in NETWORK_KINDS:
        raise InputError(f"'{fabric.link}' is a {link.kind} link; the fabric needs one of kind "
                         f"{', '.join(NETWORK_KINDS)} (e.g. ib-ndr, roce-400g, eth-100g)",
                         key="cluster.fabric.link")
    return link


def build_cluster(design: NodeDesign, *, nodes: int = 1, fabric: Fabric | None = None,
                  catalog: Catalog | None = None) -> Topology:
    """The cluster's topology: one node, or `nodes` copies of the design on a fabric.

    GPU and link names resolve in `catalog` [the built-in one]. A fabric given
    for one node is checked all the same (a typo in its link is an error, not
    silently unused) and then has nothing to join.
    """
    catalog = catalog or builtin_catalog()
    check_cluster_size(nodes, design.gpus)
    link = None if fabric is None else _fabric_link(fabric, catalog)
    if nodes == 1:
        return Topology(build_node_graph(design, catalog=catalog), design.name)
    if fabric is None:
        raise InputError("a fabric is required when nodes > 1", key="cluster.fabric")
    if fabric.nics_given and fabric.nics_per_node > design.gpus:
        raise InputError(f"is {fabric.nics_per_node}, more NICs than the {design.gpus} GPUs of a {design.name} node; "
                         f"allowed: 1 to {design.gpus} (at most one compute NIC per GPU)",
                         key="cluster.fabric.nics_per_node")
    g = nx.Graph(name=f"{nodes}x {design.name}")
    # Every node is the same design: built once, then copied under each node's prefix.
    template = build_node_graph(design, nic_count=fabric.nics_per_node, nic_link=fabric.link, catalog=catalog)
    nic_names = []
    for k in range(nodes):
        check_time()
        nic_names.append(add_node_copy(g, template, f"n{k}/", k))
    _fabric_graph(g, nic_names, fabric, link)
    return Topology(g, f"{nodes}x {design.name}")
