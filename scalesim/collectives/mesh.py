"""Rings on a fully connected board (a link between every pair of GPUs, no switch: AMD's 8-GPU xGMI mesh).

A ring uses one outgoing and one incoming link per GPU, so a collective spreads
its channels over rings on different links. RCCL's own ring set for the 8x MI300X
board (ROCm/rccl src/graph/rome_models.cc, rome_model_79: 14 rings) uses each of
the 56 directed GPU-to-GPU links exactly twice, i.e. every link of every GPU
equally. The set found here does the same with n-1 arc-disjoint Hamiltonian
rings, which exist for every n but 4 and 6 (Tillson 1980, "A Hamiltonian
decomposition of K*_2m, 2m >= 8"); the search is bounded and falls back to the
greedy set (first ring in the unused links, repeated) when it finds none.
"""

from __future__ import annotations

SEARCH_BUDGET = 20_000      # extension attempts before giving up on a full decomposition
NO_DECOMPOSITION = (4, 6)   # Tillson: the complete digraphs on 4 and 6 vertices have none
MAX_SEARCH_RANKS = 11       # beyond, the bounded search does not finish: greedy


def _hamiltonian_rings(n: int, used: set[tuple[int, int]], budget: list[int], first_only: bool):
    """Hamiltonian rings from rank 0 over arcs not in `used`, in lexicographic order."""
    path = [0]

    def extend():
        if budget[0] <= 0:
            return
        budget[0] -= 1
        if len(path) == n:
            if (path[-1], 0) not in used:
                yield list(path)
            return
        for v in range(1, n):
            if v not in path and (path[-1], v) not in used:
                path.append(v)
                yield from extend()
                path.pop()
                if first_only and budget[0] <= 0:
                    return

    yield from extend()


def _arcs(ring: list[int]) -> set[tuple[int, int]]:
    return {(ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring))}


def _decompose(n: int, used: set[tuple[int, int]], budget: list[int]) -> list[list[int]] | None:
    if len(used) == n * (n - 1):
        return []
    for ring in _hamiltonian_rings(n, used, budget, first_only=False):
        rest = _decompose(n, used | _arcs(ring), budget)
        if rest is not None:
            return [ring, *rest]
        if budget[0] <= 0:
            return None
    return None


def greedy_rings(n: int) -> list[list[int]]:
    """Arc-disjoint rings, greedily: the first Hamiltonian ring in the unused arcs, until none is left."""
    used: set[tuple[int, int]] = set()
    rings: list[list[int]] = []
    while True:
        ring = next(_hamiltonian_rings(n, used, [SEARCH_BUDGET], first_only=True), None)
        if ring is None:
            return rings
        rings.append(ring)
        used |= _arcs(ring)


def mesh_rings(n: int) -> list[list[int]]:
    """Arc-disjoint rings through 0..n-1 that use every link (n-1 rings) where such a set exists.

    >>> mesh_rings(3)
    [[0, 1, 2], [0, 2, 1]]
    >>> len(mesh_rings(8))
    7
    """
    if n < 2:
        return []
    full = None
    if n not in NO_DECOMPOSITION and n <= MAX_SEARCH_RANKS:
        full = _decompose(n, set(), [SEARCH_BUDGET])
    return full if full else greedy_rings(n)
