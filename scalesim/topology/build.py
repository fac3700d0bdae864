"""Builders: a node design becomes a networkx graph.

Nodes carry `kind` (gpu | pcie_switch | cpu | host_memory | nvswitch | nic)
and, where it matters, `socket` and `index`. Edges carry `link` (a LinkSpec)
and `duplex` (False for host memory, whose bandwidth reads and writes share).
"""

from __future__ import annotations

import networkx as nx

from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.hardware.user_catalog import Catalog, builtin_catalog
from scalesim.topology.design import NodeDesign, host_cpu


def node_gpu(design: NodeDesign, catalog: Catalog | None = None) -> GpuSpec:
    return (catalog or builtin_catalog()).resolve_gpu(design.gpu, key="gpu")


def build_node_graph(design: NodeDesign, prefix: str = "", server: int = 0,
                     nic_count: int | None = None, nic_link: str | None = None,
                     catalog: Catalog | None = None) -> nx.Graph:
    """One server as a graph. GPU i is node f'{prefix}gpu{i}'; every node carries `server`.

    `nic_count` and `nic_link` override the design's NICs (a cluster's fabric
    decides how many NICs per node are cabled and at what speed).

    GPUs and PCIe switches are spread evenly over the CPU sockets, GPUs evenly
    over the switches, NICs over the switches (or sockets when attached to
    the host), in index order, as vendors number them.

    >>> from scalesim.topology.design import NodeDesign
    >>> g = build_node_graph(NodeDesign(name="t", gpu="h100-sxm", gpus=8, nvlink={"fabric": "nvswitch"}))
    >>> sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu")
    8
    """
    catalog = catalog or builtin_catalog()
    get_link = catalog.resolve_link
    gpu = node_gpu(design, catalog)
    g = nx.Graph(name=design.name)
    _add_host(g, design, get_link, prefix)
    slot = _add_pcie(g, design, gpu, get_link, prefix)
    if design.nvlink is not None:
        _add_nvlink(g, design, gpu, get_link, prefix)
    _add_nics(g, design, slot, nic_count, nic_link, get_link, prefix)
    for node in g:
        g.nodes[node]["server"] = server
    return g


def add_node_copy(g: nx.Graph, template: nx.Graph, prefix: str, server: int) -> list[str]:
    """Add to `g` a copy of the one-server `template` (built with no prefix) whose nodes are named
    `prefix` + the template's and carry `server`: the graph `build_node_graph(..., prefix, server)`
    would add, nodes and edges in the same order, built without resolving the design again.
    Returns the copy's NICs in order."""
    nodes = template.nodes(data=True)
    g.add_nodes_from((prefix + n, {**d, "server": server}) for n, d in nodes)
    g.add_edges_from((prefix + u, prefix + v, d) for u, v, d in template.edges(data=True))
    g.graph.update(template.graph)          # as nx.Graph.update(build_node_graph(...)) does
    return [prefix + n for n, d in nodes if d["kind"] == "nic"]


def _add_host(g: nx.Graph, design: NodeDesign, get_link, p: str) -> None:
    """The CPU sockets, each with its memory, joined in a chain by the socket link."""
    sockets = design.host.sockets
    memory = get_link(design.host.memory, key="host.memory")
    for s in range(sockets):
        g.add_node(f"{p}cpu{s}", kind="cpu", socket=s)
        g.add_node(f"{p}mem{s}", kind="host_memory", socket=s)
        g.add_edge(f"{p}cpu{s}", f"{p}mem{s}", link=memory, duplex=False)
    if sockets > 1:
        socket_link = get_link(design.host.socket_link, key="host.socket_link")
        for s in range(sockets - 1):
            g.add_edge(f"{p}cpu{s}", f"{p}cpu{s + 1}", link=socket_link, duplex=True)


def _add_pcie(g: nx.Graph, design: NodeDesign, gpu: GpuSpec, get_link, p: str):
    """The PCIe switches under the sockets and the GPUs under the switches (or the sockets);
    returns the slot link, which the NICs use too."""
    sockets = design.host.sockets
    slot = get_link(design.pcie.link or gpu.pcie, key="pcie.link")
    uplink = get_link(design.pcie.uplink, key="pcie.uplink") if design.pcie.uplink else slot
    switches = design.pcie.switches
    for k in range(switches):
        socket = k * sockets // switches
        g.add_node(f"{p}sw{k}", kind="pcie_switch", socket=socket, index=k)
        g.add_edge(f"{p}sw{k}", f"{p}cpu{socket}", link=uplink, duplex=True)

    p2p = gpu.pcie_p2p if design.p2p is None else design.p2p
    # NCCL's default P2P level: through the CPUs (PATH_SYS) on AMD, only below a PCIe switch
    # (PATH_PXB) on Intel and ARM (NVIDIA/nccl src/graph/paths.cc ncclTopoCheckP2p, since 2.9.6)
    via_cpu = host_cpu(design.host) == "amd"
    for i in range(design.gpus):
        socket = i * sockets // design.gpus
        g.add_node(f"{p}gpu{i}", kind="gpu", socket=socket, index=i, spec=gpu, p2p=p2p, p2p_via_cpu=via_cpu)
        parent = f"{p}sw{i * switches // design.gpus}" if switches else f"{p}cpu{socket}"
        g.add_edge(f"{p}gpu{i}", parent, link=slot, duplex=True)
    return slot


def _add_nics(g: nx.Graph, design: NodeDesign, slot, nic_count: int | None, nic_link: str | None, get_link,
              p: str) -> None:
    """The NICs on the PCIe switches (or the sockets), `nic_count` and `nic_link` over the design's.
    `attach: gpu`: each NIC on a GPU's own I/O (in GPU order), joined at the NIC's own rate, so the
    GPU's host slot does not carry its scale-out traffic (AMD Helios: 300 GB/s a GPU over a
    PCIe 6.0 host slot of 121)."""
    nics, sockets, switches = design.nics, design.host.sockets, design.pcie.switches
    count = nics.count if nic_count is None else nic_count
    link_name = nic_link or nics.link
    network = get_link(link_name, key="nics.link") if link_name else None
    for k in range(count):
        if nics.attach == "gpu":
            parent = f"{p}gpu{k * design.gpus // count}"
        elif nics.attach == "pcie-switch" and switches:
            parent = f"{p}sw{k * switches // count}"
        else:
            parent = f"{p}cpu{k * sockets // count}"
        g.add_node(f"{p}nic{k}", kind="nic", index=k, link=network, socket=g.nodes[parent]["socket"])
        g.add_edge(f"{p}nic{k}", parent, link=network if nics.attach == "gpu" and network else slot, duplex=True)


def _add_nvlink(g: nx.Graph, design: NodeDesign, gpu: GpuSpec, get_link, p: str) -> None:
    """The GPUs' scale-up links: one switch fabric, bridged pairs, or a link between every pair."""
    if gpu.nvlink is None:
        raise InputError(f"{gpu.full_name} has no NVLink; remove the 'nvlink' section", key="nvlink")
    port = get_link(design.nvlink.link or gpu.nvlink, key="nvlink.link")
    if design.nvlink.fabric != "bridge" and design.gpus > gpu.nvlink_max_gpus:
        raise InputError(f"{design.gpus} GPUs cannot share one NVLink domain: a {gpu.full_name} "
                         f"joins at most {gpu.nvlink_max_gpus}", key="gpus")
    if design.nvlink.fabric == "mesh":
        for i in range(design.gpus):
            for j in range(i + 1, design.gpus):
                g.add_edge(f"{p}gpu{i}", f"{p}gpu{j}", link=port, duplex=True)
    elif design.nvlink.fabric == "nvswitch":
        switch = get_link(design.nvlink.switch, key="nvlink.switch") if design.nvlink.switch else None
        g.add_node(f"{p}nvswitch", kind="nvswitch", link=switch,
                   in_network_reduction=bool(switch and switch.in_network_reduction))
        for i in range(design.gpus):
            g.add_edge(f"{p}gpu{i}", f"{p}nvswitch", link=port, duplex=True)
    else:
        for i in range(0, design.gpus - 1, 2):
            g.add_edge(f"{p}gpu{i}", f"{p}gpu{i + 1}", link=port, duplex=True)
