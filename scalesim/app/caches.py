"""What one command reuses between the steps it simulates, owned by that command.

A run simulates the same cluster several times (the scaling curve, the what-if fixes), and a
sweep hundreds of plans on a few clusters: building a 2,048-node graph, or planning the same
collective again, would cost more than simulating the step. The command creates one `Caches`
and passes it down (`prepare(..., caches=)`); nothing is kept in the process between commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from scalesim.hardware.user_catalog import Catalog
from scalesim.models import ModelSpec
from scalesim.topology import Fabric, NodeDesign, Topology, build_cluster, load_node_design

CLUSTERS_KEPT = 4        # a sweep's GPU counts in flight; older clusters (and their plans) are dropped


@dataclass
class Caches:
    clusters: dict[tuple, Topology] = field(default_factory=dict)     # inputs -> cluster, oldest first
    memos: dict[int, dict] = field(default_factory=dict)              # id(cluster) -> its plans and timings
    designs: dict[tuple, NodeDesign] = field(default_factory=dict)    # (cluster.node, file, catalog) -> design
    models: dict[tuple, ModelSpec] = field(default_factory=dict)      # (model, training keys, file) -> model

    def design(self, spec: str | dict, key: str, file: str | None, catalog: Catalog | None) -> NodeDesign:
        """`load_node_design`, or the design read from the same inputs before (a sweep names one
        node design for hundreds of plans: parsing its YAML each time cost more than the plan check)."""
        name = json.dumps(spec, sort_keys=True, default=str) if isinstance(spec, dict) else spec
        memo_key = (name, key, file, catalog)
        if memo_key not in self.designs:
            self.designs[memo_key] = load_node_design(spec, key=key, file=file, catalog=catalog)
        return self.designs[memo_key]

    def model(self, key: tuple, build: Callable[[], ModelSpec]) -> ModelSpec:
        """`build()`, or the model built for the same key before: a sweep's plans (a few micro-batch and
        recompute variants of its training keys) share one model, whose layers then serve the
        per-topology memos by identity (parallel/sharding.py) instead of being hashed anew."""
        if key not in self.models:
            self.models[key] = build()
        return self.models[key]

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
