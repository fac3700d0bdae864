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
        kinds: list[str] = []
        ends: list[tuple[str, str]] = []
        for u, v, data in graph.edges(data=True):
            link = data["link"]
            cap = link.bw_bytes_per_s * link.efficiency
            if data["duplex"]:
                for a, b in ((u, v), (v, u)):
                    self._resource[(a, b)] = len(capacity)
                    capacity.append(cap)
                    names.append(f"{a}->{b} ({link.name})")
                    kinds.append(link.kind)
                    ends.append((a, b))
            else:
                rid = len(capacity)
                self._resource[(u, v)] = self._resource[(v, u)] = rid
                capacity.append(cap)
                names.append(f"{u}<->{v} ({link.name})")
                kinds.append(link.kind)
                ends.append((u, v))
        self.capacity_bytes_per_s: tuple[float, ...] = tuple(capacity)
        self.resource_names: tuple[str, ...] = tuple(names)
        self._resource_kind: tuple[str, ...] = tuple(kinds)
        self._resource_ends: tuple[tuple[str, str], ...] = tuple(ends)
        self._servers_on_switch: dict[str, frozenset[int]] | None = None
        self._routes: dict[tuple[int, int], tuple[str, ...]] = {}
        first = min((d["server"] for _, d in graph.nodes(data=True) if d["kind"] == "gpu"), default=0)
        self._template = next((self._split(n)[0] for n, d in graph.nodes(data=True)
                               if d["kind"] == "gpu" and d["server"] == first), "")
        self._pcie = graph.subgraph(n for n, d in graph.nodes(data=True)
                                    if d["kind"] in ("gpu", "pcie_switch", "cpu", "nic") and d["server"] == first)
        self._local_paths: dict[tuple[str, str], tuple[str, ...]] = {}
        self._fabric = graph.subgraph(n for n, d in graph.nodes(data=True)
                                      if d["kind"] in ("nic", "fabric_switch"))
        self._memory = {(d["server"], d["socket"]): n for n, d in graph.nodes(data=True)
                        if d["kind"] == "host_memory"}
        self._nics: dict[int, list[str]] = {}
        self._gpus_per_server: dict[int, int] = {}
        for n, d in graph.nodes(data=True):
            if d["kind"] == "nic":
                self._nics.setdefault(d["server"], []).append(n)
            elif d["kind"] == "gpu":
                self._gpus_per_server[d["server"]] = self._gpus_per_server.get(d["server"], 0) + 1
        self._server_of_rank = tuple(graph.nodes[g]["server"] for g in self.gpus)
        self._to_nic: dict[str, tuple[str, ...]] = {}       # GPU -> its NIC, nodes in order
        self._from_nic: dict[str, tuple[str, ...]] = {}     # its NIC -> GPU
        self._fabric_paths: dict[tuple[str, str], tuple[str, ...]] = {}   # leaf to leaf
        self._nic_uplinks: dict[str, tuple[str, ...]] = {}
        self._routes_memo: dict = {}  # its own derived routes and link classes (layers above keep theirs)

    @property
    def gpu_spec(self) -> GpuSpec:
        return self.graph.nodes[self.gpus[0]]["spec"]

    def node_of(self, rank: int) -> str:
        return self.gpus[rank]

    def _p2p(self, node: str) -> bool:
        return bool(self.graph.nodes[node].get("p2p", False))

    def server_of(self, rank: int) -> int:
        return self._server_of_rank[rank]

    def ranks_by_server(self, ranks: tuple[int, ...]) -> list[list[int]]:
        """The ranks grouped by server, servers and ranks in the given order."""
        groups: dict[int, list[int]] = {}
        for r in ranks:
            groups.setdefault(self.server_of(r), []).append(r)
        return list(groups.values())

    def path(self, src: int, dst: int) -> tuple[str, ...]:
        """Graph nodes a GPU-to-GPU copy passes, in order.

        Within a server: NVLink (bridge or NVSwitch) when both GPUs are on
        it; else PCIe peer-to-peer through the nearest common switch, or root
        complex on AMD hosts (NCCL's default P2P level), when the node allows
        P2P; else staged through the sender
        socket's host memory (device-to-host, then host-to-device), as NCCL's
        SHM transport does on GeForce cards. Between servers: to the GPU's
        nearest NIC (GPUDirect RDMA when the GPU allows P2P, else through host
        memory), across the fabric, and from the receiving NIC to the GPU.
        """
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._find_path(self.gpus[src], self.gpus[dst])
        return self._routes[key]

    def nic_count(self, server: int) -> int:
        return len(self._nics.get(server, []))

    def nic_of(self, gpu: str) -> str:
        """The NIC NCCL would use for a GPU: NICs are shared out in GPU order (the nearest by construction)."""
        data = self.graph.nodes[gpu]
        nics = self._nics.get(data["server"], [])
        if not nics:
            raise ValueError(f"server {data['server']} has no NIC")
        gpus_here = self._gpus_per_server[data["server"]]
        return nics[data["index"] * len(nics) // gpus_here]

    def _find_path(self, a: str, b: str) -> tuple[str, ...]:
        g = self.graph
        if a == b:
            return (a,)
        if g.nodes[a]["server"] != g.nodes[b]["server"]:
            if a not in self._to_nic:
                self._to_nic[a] = self._local(a, self.nic_of(a))
            if b not in self._from_nic:
                self._from_nic[b] = self._local(self.nic_of(b), b)
            up, down = self._to_nic[a], self._from_nic[b]
            return up + self._fabric_path(up[-1], down[0])[1:] + down[1:]
        if g.has_edge(a, b):
            return (a, b)
        for n in g.neighbors(a):
            if g.nodes[n]["kind"] == "nvswitch" and g.has_edge(n, b):
                return (a, n, b)
        return self._local(a, b)

    @staticmethod
    def _split(node: str) -> tuple[str, str]:
        """(server prefix, name inside the server): 'n3/gpu1' -> ('n3/', 'gpu1')."""
        cut = node.find("/") + 1
        return node[:cut], node[cut:]

    def _local(self, a: str, b: str) -> tuple[str, ...]:
        """A PCIe path inside one server, found once on the first server (all servers are copies)."""
        prefix, name_a = self._split(a)
        _, name_b = self._split(b)
        key = (name_a, name_b)
        if key not in self._local_paths:
            self._local_paths[key] = tuple(self._split(n)[1] for n in
                                           self._template_path(self._template + name_a, self._template + name_b))
        return tuple(prefix + n for n in self._local_paths[key])

    def _template_path(self, a: str, b: str) -> tuple[str, ...]:
        """Peer-to-peer through the PCIe tree, or staged through the sending socket's host memory:
        between GPUs, P2P only where NCCL's default allows it (on Intel and ARM hosts not through a CPU)."""
        g = self.graph
        gpu = a if g.nodes[a]["kind"] == "gpu" else b
        other = b if gpu == a else a
        if self._p2p(gpu) and (g.nodes[other]["kind"] == "nic" or self._p2p(other)):
            direct = tuple(nx.shortest_path(self._pcie, a, b))
            if g.nodes[other]["kind"] == "nic" or g.nodes[gpu].get("p2p_via_cpu", True) or \
                    not any(g.nodes[n]["kind"] == "cpu" for n in direct):
                return direct
        mem = self._memory[(g.nodes[a]["server"], g.nodes[a]["socket"])]
        cpu = next(n for n in g.neighbors(mem) if g.nodes[n]["kind"] == "cpu")
        up = nx.shortest_path(self._pcie, a, cpu)
        down = nx.shortest_path(self._pcie, cpu, b)
        return tuple(up) + (mem,) + tuple(down)

    def _fabric_path(self, nic_a: str, nic_b: str) -> tuple[str, ...]:
        """NIC to NIC through the fabric: one switch, or leaf - spine - leaf (shortest by construction)."""
        up_a, up_b = self._uplinks(nic_a), self._uplinks(nic_b)
        if len(up_a) == 1 and len(up_b) == 1:
            key = (up_a[0], up_b[0])
            if key not in self._fabric_paths:
                self._fabric_paths[key] = self._switch_path(*key)
            if self._fabric_paths[key]:
                return (nic_a,) + self._fabric_paths[key] + (nic_b,)
        return tuple(nx.shortest_path(self._fabric, nic_a, nic_b))

    def _uplinks(self, nic: str) -> tuple[str, ...]:
        """The fabric switches a NIC plugs into."""
        if nic not in self._nic_uplinks:
            g = self.graph
            self._nic_uplinks[nic] = tuple(n for n in g.neighbors(nic) if g.nodes[n]["kind"] == "fabric_switch")
        return self._nic_uplinks[nic]

    def _switch_path(self, la: str, lb: str) -> tuple[str, ...]:
        """Leaf to leaf: the leaf itself, or through the first spine both reach; () when neither."""
        g = self.graph
        if la == lb:
            return (la,)
        spines = sorted(n for n in g.neighbors(la) if g.nodes[n]["kind"] == "fabric_switch" and g.has_edge(n, lb))
        return (la, spines[0], lb) if spines else ()

    def servers_reaching(self, links) -> frozenset[int]:
        """Servers whose routes can cross a switch-to-switch link among these link resources.

        Fabric routes run NIC, leaf, [spine, leaf], NIC. A NIC's own cable is
        used only by its server; a leaf-spine trunk only by servers with a NIC
        on that leaf. So a route between servers outside this set (and outside
        the servers that own the other links) crosses none of these links.
        """
        if self._servers_on_switch is None:
            on: dict[str, set[int]] = {}
            for server, nics in self._nics.items():
                for nic in nics:
                    for switch in self._uplinks(nic):
                        on.setdefault(switch, set()).add(server)
            self._servers_on_switch = {k: frozenset(v) for k, v in on.items()}
        kind = self.graph.nodes
        out: set[int] = set()
        for link in links:
            u, v = self._resource_ends[link]
            if kind[u]["kind"] == "fabric_switch" and kind[v]["kind"] == "fabric_switch":
                out |= self._servers_on_switch.get(u, frozenset()) | self._servers_on_switch.get(v, frozenset())
        return frozenset(out)

    def link_class(self, src: int, dst: int) -> str:
        """'nvlink', 'pci' or 'net': which of NCCL's latency tables a copy falls in (AMD's xGMI counts as NVLink)."""
        key = ("link-class", src, dst)
        if key not in self._routes_memo:
            kinds = {self._resource_kind[r] for r in self.route(src, dst)}
            if kinds & {"infiniband", "roce", "ethernet"}:
                self._routes_memo[key] = "net"
            elif kinds and kinds <= {"nvlink", "nvswitch", "xgmi"}:
                self._routes_memo[key] = "nvlink"
            else:
                self._routes_memo[key] = "pci"
        return self._routes_memo[key]

    def via_host_memory(self, src: int, dst: int) -> bool:
        """True when a copy between two GPUs is staged in host memory (no peer-to-peer)."""
        return any(self._resource_kind[r] == "memory" for r in self.route(src, dst))

    def host_route(self, rank: int, to_host: bool) -> tuple[int, ...]:
        """Link resources of a copy between a GPU and its own socket's host memory (ZeRO-Offload)."""
        key = ("host-route", rank, to_host)
        if key not in self._routes_memo:        # each GPU's, for every copy its server's ranks make
            self._routes_memo[key] = self._host_route(rank, to_host)
        return self._routes_memo[key]

    def _host_route(self, rank: int, to_host: bool) -> tuple[int, ...]:
        gpu = self.gpus[rank]
        g = self.graph
        mem = self._memory[(g.nodes[gpu]["server"], g.nodes[gpu]["socket"])]
        cpu = next(n for n in g.neighbors(mem) if g.nodes[n]["kind"] == "cpu")
        prefix, _ = self._split(gpu)
        up = tuple(prefix + self._split(n)[1] for n in
                   nx.shortest_path(self._pcie, self._template + self._split(gpu)[1], self._template + self._split(cpu)[1]))
        nodes = up + (mem,) if to_host else (mem,) + up[::-1]
        return tuple(self._resource[(u, v)] for u, v in zip(nodes, nodes[1:]))

    def gpus_per_socket(self) -> int:
        sockets = max(1, len(self._memory) // max(1, len(self._gpus_per_server)))
        return max(1, len(self.gpus) // max(1, len(self._gpus_per_server)) // sockets)

    def host_memory_bw_bytes_per_s(self, rank: int) -> float:
        """Achieved bandwidth of the GPU's socket memory."""
        g = self.graph
        gpu = self.gpus[rank]
        mem = self._memory[(g.nodes[gpu]["server"], g.nodes[gpu]["socket"])]
        link = next(d["link"] for _, _, d in g.edges(mem, data=True))
        return link.bw_bytes_per_s * link.efficiency

    def hop(self, u: str, v: str) -> tuple[int, ...]:
        """The resource of one directed edge, as a route of one hop."""
        return (self._resource[(u, v)],)

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link resource ids of the copy from rank src to rank dst."""
        key = ("route", src, dst)
        if key not in self._routes_memo:
            nodes = self.path(src, dst)
            self._routes_memo[key] = tuple(self._resource[(u, v)] for u, v in zip(nodes, nodes[1:]))
        return self._routes_memo[key]

    def latency_s(self, src: int, dst: int) -> float:
        nodes = self.path(src, dst)
        return sum(self.graph.edges[u, v]["link"].latency_s for u, v in zip(nodes, nodes[1:]))

    def net_plugin_latency_s(self, src: int, dst: int) -> float:
        """The latency an NCCL net plugin reports for the network links of this copy (0 without one)."""
        key = ("net_plugin", src, dst)        # asked per ring edge of every collective planned
        if key not in self._routes_memo:
            nodes = self.path(src, dst)
            self._routes_memo[key] = max((self.graph.edges[u, v]["link"].net_plugin_latency_s
                                          for u, v in zip(nodes, nodes[1:])), default=0.0)
        return self._routes_memo[key]

    def bottleneck_bytes_per_s(self, src: int, dst: int) -> float:
        """Capacity of the tightest resource on the route, alone on the network."""
        return min((self.capacity_bytes_per_s[r] for r in self.route(src, dst)), default=float("inf"))
