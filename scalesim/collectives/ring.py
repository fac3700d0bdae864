"""Ring algorithms, as NCCL runs them, expanded into flows on the topology.

NCCL pipelines a ring collective: the buffer is cut into chunks that stream
around the ring, so in steady state every ring edge (rank i -> rank i+1)
carries data at once for the whole call. We model that steady state: one
phase with one flow per ring edge carrying the bytes that edge moves in total,
plus the per-step latency of the 2(N-1) (all-reduce) or N-1 steps. Flows that
share a physical link (host memory, a PCIe uplink, a socket link) slow each
other down in the engine; nothing here assumes a bandwidth.

Per edge, for a buffer of S bytes on N ranks (Patarasuk & Yuan 2009; NCCL):
all-reduce 2(N-1)/N*S, reduce-scatter and all-gather (N-1)/N*S, broadcast
and reduce S (a pipelined chain of N-1 edges).
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.topology import Topology

# Per-step software/protocol latency of an NCCL ring step on top of the hop
# latency of the links (Simple protocol). A placeholder until the collectives
# issue calibrates LL/LL128/Simple against nccl-tests small-message latencies.
STEP_OVERHEAD_S = 1.0e-6
# Fixed cost of launching one collective kernel (order of nccl-tests' smallest
# all-reduce times on one node, ~5-10 us).
LAUNCH_S = 5.0e-6


def _steps_and_bytes(op: str, n: int, size_bytes: float) -> tuple[int, float, bool]:
    """(sequential steps, bytes per ring edge, closed ring?) for an op."""
    if op == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n * size_bytes, True
    if op in ("reduce_scatter", "all_gather"):
        return n - 1, (n - 1) / n * size_bytes, True
    if op in ("broadcast", "reduce"):
        return n - 1, size_bytes, False
    raise ValueError(f"ring does not implement {op}")


def ring_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float) -> CollectivePlan:
    """Expand a ring collective on `ranks` (in ring order) into one phase of flows."""
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(op, "ring", tuple(ranks), size_bytes, ())
    steps, edge_bytes, closed = _steps_and_bytes(op, n, size_bytes)
    edges = [(ranks[i], ranks[(i + 1) % n]) for i in range(n if closed else n - 1)]
    flows = tuple(
        Flow(topology.node_of(a), topology.node_of(b), topology.route(a, b), edge_bytes)
        for a, b in edges
    )
    hop_s = max(topology.latency_s(a, b) for a, b in edges)
    latency_s = LAUNCH_S + steps * (hop_s + STEP_OVERHEAD_S)
    return CollectivePlan(op, "ring", tuple(ranks), size_bytes, (Phase(latency_s, flows),))
