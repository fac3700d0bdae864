"""The scenario's cluster: its node design and fabric resolved, built (or reused from the command's
caches), and the GPU count the run uses checked against it."""

from __future__ import annotations

from scalesim.app.caches import Caches
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.scenario import Scenario
from scalesim.topology import NodeDesign, Topology


def cluster_of(scenario: Scenario, file: str | None, gpus: int | None, catalog: Catalog | None,
               caches: Caches) -> tuple[NodeDesign, Topology, int]:
    """The scenario's node design, its cluster, and how many of its GPUs the run uses."""
    design = caches.design(scenario.cluster.node, "cluster.node", file, catalog)
    fabric = scenario.cluster.fabric
    try:
        topology = caches.cluster(design, scenario.cluster.nodes, None if fabric is None else fabric.as_fabric(),
                                  catalog)
    except InputError as exc:
        inline = isinstance(scenario.cluster.node, dict) and not (exc.key or "").startswith("cluster.")
        raise exc.located(file=file, key_prefix="cluster.node" if inline else None) from None
    available = len(topology.gpus)
    count = gpus or scenario.cluster.gpus or available
    if count > available:
        raise InputError(f"asks for {count} GPUs but the cluster has {available} "
                         f"({scenario.cluster.nodes} x {design.name}); allowed: 1..{available}",
                         file=file, key="cluster.gpus")
    return design, topology, count
