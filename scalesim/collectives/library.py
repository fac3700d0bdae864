"""Which collective library a group of GPUs runs: NCCL on NVIDIA GPUs, RCCL on AMD's.

RCCL is AMD's port of NCCL: the same algorithms and protocols, but its own
tuning (base and per-step latencies, which protocols are enabled) and no NVLS
(scalesim/collectives/protocol.py). The GPU's architecture decides: AMD's
Instinct parts are CDNA ('cdna3' MI300X/MI325X, 'cdna4' MI355X in the catalog).
"""

from __future__ import annotations

from scalesim.topology import Topology

RCCL_ARCH_PREFIX = "cdna"


def library_of(topology: Topology, ranks: tuple[int, ...]) -> str:
    """'rccl' when the group's first GPU is an AMD (CDNA) part, else 'nccl'."""
    if not ranks:
        return "nccl"
    spec = topology.graph.nodes[topology.node_of(ranks[0])].get("spec")
    return "rccl" if str(getattr(spec, "arch", "")).startswith(RCCL_ARCH_PREFIX) else "nccl"
