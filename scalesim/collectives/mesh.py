"""Rings on a fully connected board (a link between every pair of GPUs, no switch: AMD's 8-GPU xGMI mesh).

A ring uses one outgoing and one incoming link per GPU, so a collective spreads
its channels over rings on different links. RCCL's own ring set for the 8x MI300X
board (ROCm/rccl src/graph/rome_models.cc, rome_model_79: 14 rings) uses each of
the 56 directed GPU-to-GPU links exactly twice, i.e. every link of every GPU
equally. The set found here does the same with n-1 arc-disjoint Hamiltonian
rings, which exist for every n but 4 and 6 (Tillson 1980, "A Hamiltonian
decomposition of K*_2m, 2m >= 8"); the search is bounded and falls back to the
greedy set (first ring in the unused links, repeated) when it finds none.

Across servers RCCL does not close a ring inside the board: each channel enters a
server through one GPU's NIC, visits every GPU and leaves through another GPU's
NIC. Its model for 8 MI300X with 8 NICs (rome_models.cc rome_model_81, ringBase
@0cbce2a lines 598-605) has 8 such paths that use the 56 directed links once each
and start and end on every GPU once (each NIC carries one channel each way), and
odd-numbered servers run them in reverse (parseA2a8P, lines 1869-1872: 'For even
number of nodes, alternate forward/reverse on ringBase'), so a channel leaves one
server and enters the next on the same GPU index, the same rail. `mesh_paths`
builds paths with those properties for any even board (Walecki's zigzag, its
rotations and their reverses).
"""

from __future__ import annotations

SEARCH_BUDGET = 20_000      # extension attempts before giving up on a full decomposition
NO_DECOMPOSITION = (4, 6)   # Tillson: the complete digraphs on 4 and 6 vertices have none
MAX_SEARCH_RANKS = 11       # beyond, the bounded search does not finish: greedy
NO_PATH_DECOMPOSITION = (3, 5)  # an exhaustive search finds no n arc-disjoint Hamiltonian paths with distinct ends


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


def _paths_from(n: int, path: list[int], used: set, ends: set, budget: list[int]):
    """Hamiltonian paths extending `path` over arcs not in `used`, ending on a GPU not in `ends`."""
    if budget[0] <= 0:
        return
    budget[0] -= 1
    if len(path) == n:
        if path[-1] not in ends:
            yield list(path)
        return
    for v in range(n):
        if v not in path and (path[-1], v) not in used:
            path.append(v)
            yield from _paths_from(n, path, used, ends, budget)
            path.pop()


def _path_decomposition(n: int, start: int, used: set, ends: set, budget: list[int]) -> list[list[int]] | None:
    """Arc-disjoint Hamiltonian paths, the i-th starting on GPU i (i >= start), their ends all different."""
    if start == n:
        return []
    for path in _paths_from(n, [start], used, ends, budget):
        arcs = {(path[i], path[i + 1]) for i in range(n - 1)}
        rest = _path_decomposition(n, start + 1, used | arcs, ends | {path[-1]}, budget)
        if rest is not None:
            return [path, *rest]
        if budget[0] <= 0:
            return None
    return None


def mesh_paths(n: int) -> list[list[int]]:
    """n Hamiltonian paths through 0..n-1, the i-th starting on GPU i, one ending on every GPU, that
    use every directed link once: for even n Walecki's zigzag 0, 1, n-1, 2, n-2, ..., its rotations
    and their reverses; for odd n a bounded search (none exists for 3 and 5: then each ring of
    `mesh_rings` opened at a different GPU, a ring reused when there are fewer rings than GPUs).

    >>> mesh_paths(4)
    [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
    """
    if n < 2:
        return [[0]] * n
    if n % 2 == 0:
        zigzag = [0]
        low, high = 1, n - 1
        while len(zigzag) < n:
            zigzag.append(low)
            low += 1
            if len(zigzag) < n:
                zigzag.append(high)
                high -= 1
        half = [[(v + i) % n for v in zigzag] for i in range(n // 2)]
        return sorted(half + [p[::-1] for p in half])
    found = None
    if n <= MAX_SEARCH_RANKS and n not in NO_PATH_DECOMPOSITION:
        found = _path_decomposition(n, 0, set(), set(), [SEARCH_BUDGET])
    if found:
        return found
    rings = mesh_rings(n)
    paths = []
    for start in range(n):
        ring = rings[start % len(rings)]
        at = ring.index(start)
        paths.append(ring[at:] + ring[:at])
    return paths
