"""Ring algorithms, as NCCL runs them, expanded into flows on the topology.

NCCL pipelines a ring collective: the buffer is cut into chunks that stream
around the ring, so in steady state every ring edge (rank i -> rank i+1)
carries data at once for the whole call. We model that steady state: one
phase with one flow per ring edge carrying the bytes that edge moves in total,
after the latency of the algorithm's steps. Flows that share a physical link
(host memory, a PCIe uplink, a socket link, a NIC) slow each other down in the
engine; nothing here assumes a bandwidth.

Per edge, for a buffer of S bytes on N ranks (Patarasuk & Yuan 2009; NCCL):
all-reduce 2(N-1)/N*S, reduce-scatter and all-gather (N-1)/N*S, broadcast
and reduce S (a pipelined chain of N-1 edges).

Channels: across nodes NCCL runs one ring per NIC ("channel"), each rotated
so that it leaves and enters every node through a different GPU and NIC, and
each carrying 1/C of the data; inside one node all rings cross the same links,
so one channel stands for them.

Fully connected boards (AMD's 8-GPU xGMI mesh: one link between every pair of
GPUs, no switch) are the exception: a ring uses one link out of each GPU, so
RCCL spreads its channels over rings that use different links. We model that
with n-1 arc-disjoint rings (`collectives/mesh.py`: 7 on 8 GPUs, every link of
every GPU carrying data, as RCCL's own MI300X ring set does), each carrying 1/C
of the data. Across servers of such boards RCCL runs one channel per GPU, each on
its own path through the server (in on one GPU's NIC, out on another's, no
link used twice: `mesh_paths`), odd servers in reverse so every hop between
servers stays on one rail (ROCm/rccl rome_model_81). NCCL's algorithms are taken to be RCCL's otherwise, with RCCL's
latencies and protocols (scalesim/collectives/protocol.py).
"""

from __future__ import annotations

from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.collectives.library import library_of
from scalesim.collectives.mesh import mesh_paths, mesh_rings
from scalesim.collectives.protocol import bandwidth_fraction, base_latency_s, net_step_latency_s, step_latency_s
from scalesim.topology import Topology


def steps_and_edge_fraction(op: str, n: int) -> tuple[int, float, bool]:
    """(sequential steps, fraction of the buffer per ring edge, closed ring?)."""
    if op == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n, True
    if op in ("reduce_scatter", "all_gather"):
        return n - 1, (n - 1) / n, True
    if op in ("broadcast", "reduce"):
        return n - 1, 1.0, False
    raise ValueError(f"ring does not implement {op}")


def flow(topology: Topology, a: int, b: int, size_bytes: float, cap: float = float("inf")) -> Flow:
    return Flow(topology.node_of(a), topology.node_of(b), topology.route(a, b), size_bytes, cap)


def channel_count(topology: Topology, servers: list[list[int]]) -> int:
    """Channels NCCL spreads a multi-server collective over: one per NIC, at most one per GPU."""
    if len(servers) == 1:
        return 1
    nics = min(topology.nic_count(topology.server_of(s[0])) for s in servers)
    return max(1, min(min(len(s) for s in servers), nics))


def rotations(topology: Topology, servers: list[list[int]]) -> list[int]:
    """How far each channel rotates a server's ranks, spread so channels use different NICs."""
    channels = channel_count(topology, servers)
    stride = max(1, min(len(s) for s in servers) // channels)
    return [c * stride for c in range(channels)]


MAX_MESH_RANKS = 16     # boards with a link between every pair of GPUs hold 8; beyond, no search


def _fully_connected(topology: Topology, ranks: tuple[int, ...]) -> bool:
    """True when every pair of ranks has its own direct GPU-to-GPU link (a mesh, or a bridged pair)."""
    return 2 <= len(ranks) <= MAX_MESH_RANKS and all(
        len(topology.path(a, b)) == 2 for i, a in enumerate(ranks) for b in ranks[i + 1:])


def rccl_mesh_servers(topology: Topology, ranks: tuple[int, ...], servers: list[list[int]]) -> bool:
    """True when RCCL runs the ranks on several fully connected boards, the same number of GPUs on each."""
    return (len(servers) > 1 and len({len(s) for s in servers}) == 1 and len(servers[0]) > 1
            and library_of(topology, ranks) == "rccl"
            and all(_fully_connected(topology, tuple(s)) for s in servers))


def ring_orders(topology: Topology, ranks: tuple[int, ...]) -> list[list[int]]:
    """One ring order per channel: servers in order, each server's ranks rotated by the channel;
    on a fully connected board, one ring per set of links (`mesh_rings`)."""
    servers = topology.ranks_by_server(ranks)
    if len(servers) == 1 and _fully_connected(topology, ranks):
        return [[ranks[i] for i in ring] for ring in mesh_rings(len(ranks))]
    if rccl_mesh_servers(topology, ranks, servers):
        return [[s[i] for k, s in enumerate(servers) for i in (path if k % 2 == 0 else path[::-1])]
                for path in mesh_paths(len(servers[0]))]
    return [[r for s in servers for r in s[c:] + s[:c]] for c in rotations(topology, servers)]


def plugin_latency_s(topology: Topology, pairs) -> float:
    """The net plugin latency NCCL adds per inter-node step (its graph's NIC): the largest over `pairs`."""
    return max((topology.net_plugin_latency_s(a, b) for a, b in pairs if topology.link_class(a, b) == "net"),
               default=0.0)


def ring_latency_s(topology: Topology, order: list[int], op: str, protocol: str) -> float:
    n = len(order)
    steps, _, closed = steps_and_edge_fraction(op, n)
    edges = [(order[i], order[(i + 1) % n]) for i in range(n if closed else n - 1)]
    classes = [topology.link_class(a, b) for a, b in edges]
    inter = sum(c == "net" for c in classes)
    intra_class = next((c for c in classes if c != "net"), "nvlink")
    # NCCL: (nsteps - nInterSteps) * intraLat + nInterSteps * interLat, with the
    # inter-node share of steps in proportion to the inter-node edges.
    inter_steps = steps * inter / len(edges) if edges else 0
    lib = library_of(topology, tuple(order))
    return (base_latency_s("ring", protocol, lib)
            + (steps - inter_steps) * step_latency_s(intra_class, "ring", protocol, lib)
            + inter_steps * net_step_latency_s("ring", protocol, plugin_latency_s(topology, edges), lib))


def ring_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
              protocol: str = "simple", memo: dict | None = None) -> CollectivePlan:
    """Expand a ring collective on `ranks` into one phase of flows.

    `memo`: the caller's cache for this topology (scalesim/app/caches.py): the rings' edges and
    routes, and the latency, are the same for every size of call on the same ranks."""
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(op, "ring", tuple(ranks), size_bytes, ())
    ranks, memo = tuple(ranks), {} if memo is None else memo
    _, fraction, closed = steps_and_edge_fraction(op, n)
    edges, multi_node, lib = _rings(topology, ranks, closed, memo)
    wire = fraction * size_bytes / len(edges) / bandwidth_fraction("ring", protocol, op, multi_node, lib)
    flows = tuple(Flow(a, b, links, wire) for order in edges for a, b, links in order)
    key = ("ring-latency", op, ranks, protocol)
    if key not in memo:
        memo[key] = ring_latency_s(topology, ring_orders(topology, ranks)[0], op, protocol)
    return CollectivePlan(op, "ring", ranks, size_bytes, (Phase(memo[key], flows),), protocol)


def ring_links(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
               memo: dict | None = None) -> set:
    """The link resources the flows of `ring_plan(op, topology, ranks, size_bytes, protocol, memo)` cross,
    whatever the protocol: its rings' routes, found (and kept in `memo`) without making the plan's
    flows or its latency."""
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return set()
    edges, _, _ = _rings(topology, tuple(ranks), steps_and_edge_fraction(op, n)[2], {} if memo is None else memo)
    return {link for order in edges for _, _, links in order for link in links}


def _rings(topology: Topology, ranks: tuple[int, ...], closed: bool, memo: dict) -> tuple:
    """Per ring order, its edges as (source GPU, destination GPU, link resources); whether the
    ranks span servers; their collective library."""
    key = ("ring-edges", ranks, closed)
    if key not in memo:
        n = len(ranks)
        edges = []
        for order in ring_orders(topology, ranks):
            pairs = [(order[i], order[(i + 1) % n]) for i in range(n if closed else n - 1)]
            edges.append(tuple((topology.node_of(a), topology.node_of(b), topology.route(a, b)) for a, b in pairs))
        memo[key] = (tuple(edges), len(topology.ranks_by_server(ranks)) > 1, library_of(topology, ranks))
    return memo[key]
