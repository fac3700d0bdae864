"""Pick the algorithm for a collective and expand it.

Only rings exist so far; `auto` chooses ring for every op it implements.
The collectives issue adds tree, NVLS, hierarchical and all-to-all, and a
tuner rule that picks among them by op, size and topology.
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan
from scalesim.collectives.ring import ring_plan
from scalesim.errors import InputError
from scalesim.topology import Topology

ALGOS = ("auto", "ring")
RING_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def plan_collective(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
                    algo: str = "auto") -> CollectivePlan:
    if algo not in ALGOS:
        raise InputError(f"unknown algorithm '{algo}'; allowed: {', '.join(ALGOS)}", key="algo")
    if op not in RING_OPS:
        raise InputError(f"operation '{op}' is not implemented yet; allowed: {', '.join(RING_OPS)}",
                         key="op")
    return ring_plan(op, topology, tuple(ranks), size_bytes)
