"""The scenario's cluster: its size checked against the GPUs the run asks for, before anything is
built (a plan that cannot fit fails at once, even on 32,768 GPUs), then its graph built (or reused
from the command's caches)."""

from __future__ import annotations

from scalesim.app.caches import Caches
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import check_cluster_size
from scalesim.scenario import Scenario
from scalesim.topology import NodeDesign, Topology


def cluster_size(scenario: Scenario, file: str | None, gpus: int | None, catalog: Catalog | None,
                 caches: Caches) -> tuple[NodeDesign, int]:
    """The scenario's node design and how many of the cluster's GPUs the run uses (not built yet)."""
    design = caches.design(scenario.cluster.node, "cluster.node", file, catalog)
    nodes = scenario.cluster.nodes
    try:
        check_cluster_size(nodes, design.gpus)
    except InputError as exc:
        raise exc.located(file=file) from None
    available = nodes * design.gpus             # build_cluster: `nodes` copies of the design
    count = gpus or scenario.cluster.gpus or available
    if count > available:
        raise InputError(too_many_gpus(count, nodes, design), file=file, key="cluster.gpus")
    return design, count


def too_many_gpus(count: int, nodes: int, design: NodeDesign) -> str:
    """Why `nodes` nodes of `design` cannot give `count` GPUs (`cluster.gpus`), naming the
    `cluster.nodes` that would (`run` and `serve` alike)."""
    available = nodes * design.gpus
    more = -(-count // design.gpus)             # nodes that hold `count` GPUs
    return (f"asks for {count} GPUs but the cluster has {available} ({nodes} x {design.name}); "
            f"allowed: 1..{available}, or more nodes (cluster.nodes: {more} holds {more * design.gpus}, "
            "joined by a cluster.fabric)")


def cluster_of(scenario: Scenario, design: NodeDesign, file: str | None, catalog: Catalog | None,
               caches: Caches) -> Topology:
    """The scenario's cluster of `design` nodes on its fabric."""
    fabric = scenario.cluster.fabric
    try:
        topology = caches.cluster(design, scenario.cluster.nodes, None if fabric is None else fabric.as_fabric(),
                                  catalog)
    except InputError as exc:
        inline = isinstance(scenario.cluster.node, dict) and not (exc.key or "").startswith("cluster.")
        raise exc.located(file=file, key_prefix="cluster.node" if inline else None) from None
    return topology
