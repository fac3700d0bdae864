"""What one command reuses between the steps it simulates, owned by that command.

A run simulates the same cluster several times (the scaling curve, the what-if fixes), and a
sweep hundreds of plans on a few clusters: building a 2,048-node graph, or planning the same
collective again, would cost more than simulating the step. The command creates one `Caches`
and passes it down (`prepare(..., caches=)`); nothing is kept in the process between commands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalesim.hardware.user_catalog import Catalog
from scalesim.topology import Fabric, NodeDesign, Topology, build_cluster

CLUSTERS_KEPT = 4        # a sweep's GPU counts in flight; older clusters (and their plans) are dropped


@dataclass
class Caches:
    clusters: dict[tuple, Topology] = field(default_factory=dict)     # inputs -> cluster, oldest first
    memos: dict[int, dict] = field(default_factory=dict)              # id(cluster) -> its plans and timings

    def cluster(self, design: NodeDesign, nodes: int, fabric: Fabric | None, catalog: Catalog | None) -> Topology:
        """`build_cluster`, or the cluster built from the same inputs before."""
        key = (design.model_dump_json(), nodes, fabric, catalog)      # the catalog by content
        if key not in self.clusters:
            if len(self.clusters) >= CLUSTERS_KEPT:
                oldest = self.clusters.pop(next(iter(self.clusters)))
                self.memos.pop(id(oldest), None)
            self.clusters[key] = build_cluster(design, nodes=nodes, fabric=fabric, catalog=catalog)
        return self.clusters[key]

    def memo(self, topology: Topology) -> dict:
        """The collective plans and compute timings kept for `topology` (content-keyed inside)."""
        return self.memos.setdefault(id(topology), {})
