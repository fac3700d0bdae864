"""A collective expanded onto the topology: phases of concurrent flows.

This is the contract between the collective algorithms (which decide which
bytes move between which GPUs along which links) and the engine (which decides
when they move and how concurrent flows share links). A flow names the link
resources it crosses by integer id (see `scalesim.topology.Topology`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Flow:
    """Bytes moved from one endpoint to another along a fixed path of link resources.

    size_bytes are the bytes on the wire (a protocol's flag overhead included);
    rate_cap_bytes_per_s limits this flow alone (e.g. an in-switch reduction).
    """

    src: str
    dst: str
    links: tuple[int, ...]
    size_bytes: float
    rate_cap_bytes_per_s: float = float("inf")


@dataclass(frozen=True, slots=True)
class Phase:
    """Flows that run concurrently; the phase ends when its last flow ends.

    latency_s is paid once at the start of the phase (per-step hop and
    protocol latency of the algorithm), before the flows move bytes.
    """

    latency_s: float
    flows: tuple[Flow, ...]


@dataclass(frozen=True, slots=True)
class CollectivePlan:
    """One collective call on a group of GPUs, ready for the engine."""

    op: str
    algo: str
    ranks: tuple[int, ...]      # global GPU indices taking part
    size_bytes: float           # nccl-tests' "size": the per-rank buffer
    phases: tuple[Phase, ...]
    protocol: str = "simple"    # NCCL protocol: ll | ll128 | simple
    # Part of the phases' latency NCCL's tuner does not predict (NVLS's pipeline fill): `auto`
    # chooses as NCCL does, without it, and the call is then timed with it.
    tuner_unseen_latency_s: float = 0.0

    @property
    def bytes_sent(self) -> float:
        return sum(f.size_bytes for p in self.phases for f in p.flows)
