"""NCCL's all-to-all across servers through PXN: every byte crosses the fabric on its destination's rail.

Since NCCL 2.12, a send to a GPU on another server is not taken to the sender's
own NIC when a GPU of the sender's server that reaches the destination's NIC
rail is an NVLink peer: the data moves over NVLink to that GPU (the proxy),
which sends it through its NIC, the NIC of the destination's rail, "aggregating
messages destined for the same remote GPU" (NVIDIA technical blog, "Doubling
all2all Performance with NVIDIA Collective Communication Library 2.12", Feb
2022; NVIDIA/nccl src/graph/search.cc, `NCCL_PARAM(P2pPxnLevel,
"P2P_PXN_LEVEL", 2)`: "2: use PXN as much as possible to maximize
aggregation", and `NCCL_PXN_DISABLE` 0 by default). So on a rail-optimized
fabric an all-to-all's network traffic stays on the rails (NIC, rail switch,
NIC) instead of crossing the spine, and each server sends one aggregate per
(remote GPU) instead of one message per (local GPU, remote GPU) pair.
DeepEP's internode kernels take the mirror path (RDMA to the same-index GPU of
the destination server, then NVLink to the destination): the same rail-local
network traffic, which this plan stands for too.

The plan keeps NCCL's pipelining as one phase: the NVLink legs (sender to
proxy) and the network legs (proxy to destination) run at once, each pair's
bytes summed into one flow. NCCL only: RCCL's all-to-all is taken as plain direct sends (not
checked whether RCCL's PXN port is on by default).
"""

from __future__ import annotations

from scalesim.collectives.library import library_of
from scalesim.topology import Topology


def _rail(topology: Topology, rank: int) -> str:
    """The NIC rail of a GPU: its NIC's name inside its server (servers are copies of one design)."""
    nic = topology.nic_of(topology.node_of(rank))
    return nic.split("/", 1)[-1]


def _proxies(topology: Topology, server_ranks: list[int]) -> dict[str, int] | None:
    """Rail -> the group's GPU on this server at that rail (the first), or None when the server's GPUs
    are not all NVLink peers (no PXN there)."""
    for i, a in enumerate(server_ranks):
        for b in server_ranks[i + 1:]:
            if topology.link_class(a, b) != "nvlink":
                return None
    proxies: dict[str, int] = {}
    for r in server_ranks:
        proxies.setdefault(_rail(topology, r), r)
    return proxies


def pxn_pairs(topology: Topology, ranks: tuple[int, ...], part: float) -> dict[tuple[int, int], float] | None:
    """Bytes per (from, to) GPU pair of an all-to-all that sends `part` from every rank to every other,
    with NCCL's PXN routing; None when the ranks sit in one server, run RCCL, or a server has no NVLink
    between its GPUs or no NIC (plain direct sends then).

    >>> from scalesim.topology import build_cluster, load_node_design
    >>> from scalesim.topology.cluster import Fabric
    >>> t = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    >>> pairs = pxn_pairs(t, tuple(range(16)), 1.0)
    >>> pairs[(1, 9)], pairs[(0, 1)], (0, 9) in pairs    # GPU 9's bytes from server 0 all leave from GPU 1
    (8.0, 2.0, False)
    """
    servers = topology.ranks_by_server(ranks)
    if len(servers) <= 1 or library_of(topology, ranks) != "nccl":
        return None
    try:
        proxies = [_proxies(topology, s) for s in servers]
    except ValueError:                  # a server without NICs
        return None
    if any(p is None for p in proxies):
        return None
    pairs: dict[tuple[int, int], float] = {}

    def add(src: int, dst: int) -> None:
        pairs[(src, dst)] = pairs.get((src, dst), 0.0) + part

    for s, senders in enumerate(servers):
        for t, receivers in enumerate(servers):
            for b in receivers:
                proxy = proxies[s].get(_rail(topology, b)) if s != t else None
                for a in senders:
                    if a == b:
                        continue
                    if proxy is None or proxy == a:
                        add(a, b)
                    else:
                        add(a, proxy)               # NVLink to the GPU on the destination's rail
                        add(proxy, b)               # its NIC, the rail's switch, the destination's NIC
    return pairs
