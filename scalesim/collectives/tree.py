"""NCCL's double binary tree all-reduce (Sanders, Speck & Träff 2009; NCCL 2.4).

Across servers the ranks form two binary trees, the second mirrored so that
a server that is a leaf in one tree is inside the other; each tree reduces
and then broadcasts half of the buffer. Inside a server the tree is a chain
(NCCL's intra-node tree is a chain through the GPUs), the second tree's chain
running the other way. The up (reduce) and down (broadcast) streams are
pipelined, so every tree edge carries S/2 in each direction at once; the
latency counts 2 x (chain length + tree depth) steps, NCCL's
2 * ((ppn-1) * intraLat + log2(nodes) * interLat).

Across servers NCCL runs one tree pair per NIC ("channel"), each on 1/C of
the data and with its chains rotated so that each channel leaves the server
through a different GPU and NIC (on AMD's fully connected boards, RCCL's chains are its
ring paths, ROCm/rccl rome_models.cc @0cbce2a lines 1899-1900, 'Fall back to tree from
ringBase': channel c's chain is the path `mesh_paths` starts on GPU c, so the channels
spread over every Infinity Fabric link). NCCL's tuner rates the tree at 0.9 of the
ring's bus bandwidth (busBw * .9 in ncclTopoTuneModel); that factor is part of
the protocol's bandwidth fraction here. NCCL's tuner also caps a tree's bus
bandwidth, an empirical limit of the reduce-broadcast pipeline: maxTreeBw
(110 GB/s up to two nodes, 80 GB/s beyond) and, across servers, per channel
by GPU generation and node count (perChMaxTreeBws in src/graph/tuning.cc;
Ada runs on the Ampere row, as NCCL indexes by compute capability). We take
the tighter of the two, with our channels (one per NIC), and cap each tree
flow so the call cannot exceed it.

Medium sizes: real trees run below that model between a few KiB and a few hundred
MiB, and NCCL scales their bandwidth by a measured factor per power-of-two size
("Trees are not perfectly sticking to the model for medium sizes. Applying a static
correction factor is not ideal but works quite well": treeCorrectionFactor, indexed
by log2(nBytes / 64), src/graph/tuning.cc ncclTopoGetAlgoTime @v2.18.5-1 lines 373-388;
the same table from 2.6.4 to 2.29, and in RCCL's enqueue.cc). Down to 0.4 of the
model for LL at 512 KiB-1 MiB, 0.6 for LL128 and 0.5 for Simple around 128 KiB-1 MiB.
NCCL's tuner sees it, so it also decides when NCCL runs a tree.
"""

from __future__ import annotations

import math

from scalesim.collectives.plan import CollectivePlan, Phase
from scalesim.collectives.library import library_of
from scalesim.collectives.protocol import bandwidth_fraction, base_latency_s, net_step_latency_s, step_latency_s
from scalesim.collectives.mesh import mesh_paths
from scalesim.collectives.ring import flow, plugin_latency_s, rccl_mesh_servers, rotations
from scalesim.topology import Topology

# NCCL ncclTopoTuneModel maxTreeBw, GB/s of NCCL "busBw" (algbw = busBw / 2 for trees).
MAX_TREE_BUSBW_BYTES_PER_S = {True: 80e9, False: 110e9}   # keyed by "more than two servers"
# NCCL perChMaxTreeBws (Simple) and perChMaxTreeLL128Bws, GB/s of busBw per channel, for
# (one node, two nodes, more); Blackwell is twice Hopper in NCCL 2.23+.
PER_CHANNEL_MAX_TREE_BUSBW_BYTES_PER_S = {
    ("ampere", "simple"): (24.0e9, 23.6e9, 17.8e9), ("hopper", "simple"): (38.7e9, 41.4e9, 36.0e9),
    ("blackwell", "simple"): (77.4e9, 82.8e9, 72.0e9),
    ("ampere", "ll128"): (20.0e9, 20.0e9, 20.0e9), ("hopper", "ll128"): (36.7e9, 36.7e9, 29.0e9),
    ("blackwell", "ll128"): (73.4e9, 73.4e9, 58.0e9),
}


# NCCL treeCorrectionFactor (src/graph/tuning.cc @v2.18.5-1 line 375): the share of the
# tree's modelled bandwidth it reaches, per protocol, for sizes of 64 B x 2^i, i = 0..22.
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


def tree_correction(protocol: str, size_bytes: float) -> float:
    """NCCL's measured share of the tree model's bandwidth at this size: index log2i(nBytes >> 6),
    no correction from 512 MiB (index 23) up.

    >>> tree_correction("ll128", 1 << 20), tree_correction("simple", 1 << 30)
    (0.6, 1.0)
    """
    index = max(int(size_bytes) >> 6, 1).bit_length() - 1
    table = TREE_CORRECTION[protocol]
    return table[index] if index < len(table) else 1.0


def max_tree_busbw_bytes_per_s(arch: str, protocol: str, servers: int, channels: int) -> float:
    """The tighter of NCCL's tree caps for this call (busBw, GB/s as NCCL counts it)."""
    cap = MAX_TREE_BUSBW_BYTES_PER_S[servers > 2]
    per_channel = PER_CHANNEL_MAX_TREE_BUSBW_BYTES_PER_S.get(("ampere" if arch == "ada" else arch, protocol))
    if servers > 1 and per_channel is not None:
        cap = min(cap, channels * per_channel[min(servers, 3) - 1])
    return cap


def binary_tree_edges(order: list[int]) -> list[tuple[int, int]]:
    """(parent, child) edges of a balanced binary tree over `order` (root in the middle).

    >>> binary_tree_edges([0, 1, 2])
    [(1, 0), (1, 2)]
    """
    edges: list[tuple[int, int]] = []
    _subtree(order, 0, len(order) - 1, edges)
    return edges


def _subtree(order: list[int], lo: int, hi: int, edges: list) -> int | None:
    """The root (middle) index of order[lo..hi]'s balanced subtree, its edges appended to `edges`
    (a module function, not a closure: a recursive closure is a reference cycle per call)."""
    if lo > hi:
        return None
    mid = (lo + hi) // 2
    for child in (_subtree(order, lo, mid - 1, edges), _subtree(order, mid + 1, hi, edges)):
        if child is not None:
            edges.append((order[mid], order[child]))
    return mid


def nccl_btree_parent(nranks: int, rank: int) -> int | None:
    """The parent of `rank` in NCCL's binary tree over `nranks` (ncclGetBtree, src/graph/trees.cc
    @v2.19.3-1): rank 0 is the root, with one child."""
    if rank == 0:
        return None
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def nccl_dtree_edges(nranks: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(parent, child) edges of NCCL's two trees over `nranks` (ncclGetDtree): a binary tree,
    and the same tree mirrored (even counts) or shifted by one (odd counts), so that a rank
    inside one tree is a leaf in the other.

    >>> nccl_dtree_edges(4)
    ([(2, 1), (0, 2), (2, 3)], [(1, 2), (3, 1), (1, 0)])
    """
    first = [(nccl_btree_parent(nranks, r), r) for r in range(1, nranks)]
    if nranks % 2:
        second = [((p + 1) % nranks, (c + 1) % nranks) for p, c in first]
    else:
        second = [(nranks - 1 - p, nranks - 1 - c) for p, c in first]
    return first, second


def tree_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
              protocol: str = "simple") -> CollectivePlan:
    if op != "all_reduce":
        raise ValueError("tree implements all_reduce only (as in NCCL)")
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(op, "tree", tuple(ranks), size_bytes, ())
    servers = topology.ranks_by_server(tuple(ranks))
    multi_node = len(servers) > 1
    shifts = rotations(topology, servers)
    lib = library_of(topology, tuple(ranks))
    fraction = bandwidth_fraction("tree", protocol, op, multi_node, lib)
    wire = size_bytes / 2 / len(shifts) / (fraction * tree_correction(protocol, size_bytes))
    arch = getattr(topology.graph.nodes[topology.node_of(ranks[0])].get("spec"), "arch", "")
    algbw_cap = max_tree_busbw_bytes_per_s(arch, protocol, len(servers), len(shifts)) / 2
    cap = algbw_cap / (2 * len(shifts) * fraction)
    paths = mesh_paths(len(servers[0])) if rccl_mesh_servers(topology, tuple(ranks), servers) else None
    flows = []
    for c in shifts:
        for tree in (0, 1):
            rotated = ([[s[i] for i in paths[c]] for s in servers] if paths else [s[c:] + s[:c] for s in servers])
            chains = [s if tree == 0 else s[::-1] for s in rotated]
            heads = [chain[0] for chain in chains]
            edges = binary_tree_edges(heads if tree == 0 else heads[::-1])
            for chain in chains:
                edges += [(chain[i], chain[i + 1]) for i in range(len(chain) - 1)]
            for parent, child in edges:
                flows.append(flow(topology, child, parent, wire, cap))     # reduce, upwards
                flows.append(flow(topology, parent, child, wire, cap))     # broadcast, downwards
    ppn = max(len(s) for s in servers)
    intra = next((topology.link_class(s[0], s[1]) for s in servers if len(s) > 1), "nvlink")
    heads = [s[0] for s in servers]
    plugin = plugin_latency_s(topology, zip(heads, heads[1:]))
    latency = base_latency_s("tree", protocol, lib) + 2 * (
        (ppn - 1) * step_latency_s(intra, "tree", protocol, lib)
        + math.ceil(math.log2(len(servers))) * net_step_latency_s("tree", protocol, plugin, lib))
    return CollectivePlan(op, "tree", tuple(ranks), size_bytes, (Phase(latency, tuple(flows)),), protocol)
