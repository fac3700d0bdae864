"""A built cluster: its graph, its GPUs in rank order, routes and link resources.

Every direction of a full-duplex edge is one resource with its own capacity;
a half-duplex edge (host memory) is one resource for both directions.
Capacity is the link's line rate times its achieved efficiency, so the
engine's fair sharing starts from what transfers really reach.
"""

from __future__ import annotations

import networkx as nx

from scalesim.hardware import GpuSpec


class Topology:
    """Routes between GPUs and the link resources they use. Routes are memoised."""

    def __init__(self, graph: nx.Graph, name: str):
        self.graph = graph
        self.name = name
        self.gpus: tuple[str, ...] = tuple(
            n for n, d in graph.nodes(data=True) if d["kind"] == "gpu")
        self._resource: dict[tuple[str, str], int] = {}
        capacity: list[float] = []
        names: list[str] = []
        for u, v, data in graph.edges(data=True):
            link = data["link"]
            cap = link.bw_bytes_per_s * link.efficiency
            if data["duplex"]:
                for a, b in ((u, v), (v, u)):
                    self._resource[(a, b)] = len(capacity)
                    capacity.append(cap)
                    names.append(f"{a}->{b} ({link.name})")
            else:
                rid = len(capacity)
                self._resource[(u, v)] = self._resource[(v, u)] = rid
                capacity.append(cap)
                names.append(f"{u}<->{v} ({link.name})")
        self.capacity_bytes_per_s: tuple[float, ...] = tuple(capacity)
        self.resource_names: tuple[str, ...] = tuple(names)
        self._routes: dict[tuple[int, int], tuple[str, ...]] = {}
        self._pcie = graph.subgraph(n for n, d in graph.nodes(data=True)
                                    if d["kind"] in ("gpu", "pcie_switch", "cpu", "nic"))

    @property
    def gpu_spec(self) -> GpuSpec:
        return self.graph.nodes[self.gpus[0]]["spec"]

    def node_of(self, rank: int) -> str:
        return self.gpus[rank]

    def _p2p(self, node: str) -> bool:
        return bool(self.graph.nodes[node]["p2p"])

    def path(self, src: int, dst: int) -> tuple[str, ...]:
        """Graph nodes a GPU-to-GPU copy passes, in order.

        NVLink (bridge or NVSwitch) when both GPUs are on it; else PCIe
        peer-to-peer through the nearest common switch or root complex when
        the node allows P2P; else staged through the sender socket's host
        memory (device-to-host, then host-to-device), as NCCL's SHM transport
        does on GeForce cards.
        """
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._find_path(self.gpus[src], self.gpus[dst])
        return self._routes[key]

    def _find_path(self, a: str, b: str) -> tuple[str, ...]:
        g = self.graph
        if a == b:
            return (a,)
        if g.has_edge(a, b):
            return (a, b)
        for n in g.neighbors(a):
            if g.nodes[n]["kind"] == "nvswitch" and g.has_edge(n, b):
                return (a, n, b)
        if self._p2p(a) and self._p2p(b):
            return tuple(nx.shortest_path(self._pcie, a, b))
        socket = g.nodes[a]["socket"]
        prefix = a[: len(a) - len(a.split("/")[-1])]
        cpu, mem = f"{prefix}cpu{socket}", f"{prefix}mem{socket}"
        up = nx.shortest_path(self._pcie, a, cpu)
        down = nx.shortest_path(self._pcie, cpu, b)
        return tuple(up) + (mem,) + tuple(down)

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link resource ids of the copy from rank src to rank dst."""
        nodes = self.path(src, dst)
        return tuple(self._resource[(u, v)] for u, v in zip(nodes, nodes[1:]))

    def latency_s(self, src: int, dst: int) -> float:
        nodes = self.path(src, dst)
        return sum(self.graph.edges[u, v]["link"].latency_s for u, v in zip(nodes, nodes[1:]))

    def bottleneck_bytes_per_s(self, src: int, dst: int) -> float:
        """Capacity of the tightest resource on the route, alone on the network."""
        return min((self.capacity_bytes_per_s[r] for r in self.route(src, dst)), default=float("inf"))
