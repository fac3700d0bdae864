"""Which collective library a group of GPUs runs: NCCL on NVIDIA GPUs, RCCL on AMD's.

RCCL is AMD's port of NCCL: the same algorithms and protocols, but its own
tuning (base and per-step latencies, which protocols are enabled) and no NVLS
(scalesim/collectives/protocol.py). The GPU's architecture decides: AMD's
Instinct parts are CDNA ('cdna3' MI300X/MI325X, 'cdna4' MI355X in the catalog).

Not modelled: on 8 MI300X, RCCL (ROCm 6.0 and later) hands an all-reduce of up to
16 MiB to MSCCL before its tuner sees it (src/collectives.cc, mscclEnqueueCheck;
rome_model_79 mscclEnabled=1), and MSCCL runs the all-pairs algorithms of
tools/msccl-algorithms/allreduce-allpairs-8n-*.xml: 2 steps over the 7 links, not
the ring's 14. scalesim times RCCL's ring there; AMD's bare-metal curve and what
it implies are in validation/cases/amd-rocm-blog-mi300x.yaml.
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
