"""NVLS: all-reduce inside NVSwitch (NVLink SHARP, 3rd-generation NVSwitch and later).

Each GPU owns 1/N of the buffer. It reads its part reduced across all GPUs
through the switch (multimem.ld_reduce: the switch pulls S/N from every GPU
and returns the sum), then writes the result once and the switch multicasts it
to every GPU (multimem.st). Per GPU port, each direction carries S + S/N:
S(N+1)/N up and down, against 2(N-1)/N*S for a ring, which is where NVLS's
higher bus bandwidth comes from (nccl#1031; nccl-tests#212).

What the switch's reduction engines achieve is the NVSwitch catalog entry's
`efficiency` (fitted on the published 8x H100 NVLS bus bandwidth); it caps
each flow.

Mid-size calls: NCCL's NVLS kernel is a pipeline. Each of its 16 channels
(NCCL_NVLS_NCHANNELS, src/transport/nvls.cc) works in loops of nHeads chunks
(one per GPU), through three warp groups handing chunks on through FIFOs:
scatter (user buffer -> multicast buffer), reduce (multimem.ld_reduce +
multimem.st) and gather (src/collectives/device/all_reduce.h, NCCL 2.18.5).
A call therefore takes its bytes' time plus a fill of a few loop-times, and
the loop grows with the message: chunkSize is 128 KiB from 1 GiB (8 GPUs), 64
KiB below, 32 KiB below 64 MiB and 16 KiB below 8 MiB (src/enqueue.cc, the same
in 2.18.5-2.21.5). `pipeline_fill_s` adds that fill as latency. Its depth in
loops is the NVSwitch entry's `nvls_pipeline_fill`, fitted (scalesim calibrate's
ramp fit) on one source, Azure's ND H100 v5 nccl-tests page; NCCL's own tuner
has no such term (23 us + size / bandwidth), which is why NVLS all-reduces of
1-128 MiB measured 13-38% below that model on Azure's H100 and H200 VMs while 1-8
GiB match it. NVLSTree (several servers) keeps its own chunk rules and no fill.
"""

from __future__ import annotations

import math

from scalesim.collectives.kernels import NVLS_CHANNELS
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.collectives.protocol import base_latency_s, step_latency_s
from scalesim.collectives.ring import channel_count, flow, plugin_latency_s
from scalesim.collectives.tree import nccl_dtree_edges
from scalesim.topology import Topology


# NCCL enables NVLS only for a communicator with more than two GPUs on the node (MNNVL: in the NVLink
# clique): ncclNvlsInit returns without NVLS at gpuCount <= 2 (src/transport/nvls.cc, v2.18.5-1 to v2.28.3-1).
NVLS_MIN_LOCAL_RANKS = 3


def nvls_switch(topology: Topology, ranks: tuple[int, ...]) -> str | None:
    """The NVSwitch all `ranks` hang off, if it can reduce in-network (None across servers, or for
    two GPUs or fewer: NCCL runs no NVLS there)."""
    g = topology.graph
    if len(ranks) < NVLS_MIN_LOCAL_RANKS or len(topology.ranks_by_server(ranks)) != 1:
        return None
    switches = None
    for r in ranks:
        here = {n for n in g.neighbors(topology.node_of(r))
                if g.nodes[n]["kind"] == "nvswitch" and g.nodes[n].get("in_network_reduction")}
        switches = here if switches is None else switches & here
    return min(switches) if switches else None


def _switch_flows(topology: Topology, ranks: list[int], switch: str, per_port_bytes: float,
                  rate_cap: float = float("inf")) -> list[Flow]:
    g = topology.graph
    flows = []
    for r in ranks:
        gpu = topology.node_of(r)
        cap = min(rate_cap, g.edges[gpu, switch]["link"].bw_bytes_per_s * g.nodes[switch]["link"].efficiency)
        flows.append(Flow(gpu, switch, topology.hop(gpu, switch), per_port_bytes, cap))
        flows.append(Flow(switch, gpu, topology.hop(switch, gpu), per_port_bytes, cap))
    return flows


# NCCL perChMaxNVLSTreeBws (src/graph/tuning.cc @v2.28.3-1, ncclTunerConstantsDefaults): the bus
# bandwidth NVLSTree reaches per NVLS channel (head), GB/s, on (two nodes, more than two).
PER_CHANNEL_MAX_NVLS_TREE_BUSBW_BYTES_PER_S = {"hopper": (57.7e9, 45.5e9), "blackwell": (96.0e9, 43.1e9)}


def max_nvls_tree_busbw_bytes_per_s(arch: str, servers: int, channels: int) -> float:
    """NCCL's cap on NVLSTree's bus bandwidth: its per-channel figure for the GPU generation and
    server count, times the channels (one NVLS head per NIC, at most one per GPU).

    >>> round(max_nvls_tree_busbw_bytes_per_s("hopper", 2, 8) / 1e9, 1)
    461.6
    """
    per_channel = PER_CHANNEL_MAX_NVLS_TREE_BUSBW_BYTES_PER_S.get(arch)
    if per_channel is None or servers < 2:
        return float("inf")
    return channels * per_channel[0 if servers == 2 else 1]


NVLS_MAX_CHUNK_BYTES = 128 * 1024   # NCCL enqueue.cc maxChunkSize 131072 (NCCL_NVLS_CHUNKSIZE's default in 2.21+)
# (message below factor x nChannels x nHeads x chunk, chunk above floor) -> chunk = floor, in this order.
NVLS_CHUNK_STEPS = ((64, 65536), (8, 32768), (2, 16384))


def nvls_chunk_bytes(size_bytes: float, heads: int, channels: int = NVLS_CHANNELS) -> int:
    """The chunk NCCL's NVLS all-reduce uses for a message (src/enqueue.cc, 2.18.5-2.21.5).

    >>> [nvls_chunk_bytes(s * 2**20, 8) // 1024 for s in (1, 16, 128, 1024)]
    [16, 32, 64, 128]
    """
    chunk = NVLS_MAX_CHUNK_BYTES
    for factor, floor in NVLS_CHUNK_STEPS:
        if size_bytes < factor * channels * heads * chunk and chunk > floor:
            chunk = floor
    return chunk


def pipeline_fill_s(size_bytes: float, heads: int, port_bytes_per_s: float, fill_loops: float) -> float:
    """The NVLS kernel's pipeline fill: `fill_loops` loops of nChannels x nHeads x chunk bytes (or of
    the message, when it is smaller than one loop and leaves channels idle), each moving (N+1)/N of
    its bytes through every GPU port at `port_bytes_per_s`."""
    if fill_loops <= 0 or port_bytes_per_s <= 0:
        return 0.0
    loop = min(size_bytes, NVLS_CHANNELS * heads * nvls_chunk_bytes(size_bytes, heads))
    return fill_loops * loop * (heads + 1) / heads / port_bytes_per_s


def _fill_s(topology: Topology, ranks: list[int], switch: str, size_bytes: float) -> float:
    g = topology.graph
    spec = g.nodes[switch]["link"]
    port = min(g.edges[topology.node_of(r), switch]["link"].bw_bytes_per_s for r in ranks) * spec.efficiency
    return pipeline_fill_s(size_bytes, len(ranks), port, spec.nvls_pipeline_fill)


def nvls_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
              protocol: str = "simple") -> CollectivePlan:
    switch = nvls_switch(topology, ranks)
    if op != "all_reduce" or switch is None:
        raise ValueError("NVLS needs an all_reduce on one NVSwitch with in-network reduction")
    n = len(ranks)
    if n <= 1 or size_bytes <= 0:
        return CollectivePlan(op, "nvls", tuple(ranks), size_bytes, ())
    flows = _switch_flows(topology, list(ranks), switch, size_bytes * (n + 1) / n)
    fill_s = _fill_s(topology, list(ranks), switch, size_bytes)
    latency = base_latency_s("nvls", "simple") + 2 * step_latency_s("nvlink", "ring", "simple") + fill_s
    return CollectivePlan(op, "nvls", tuple(ranks), size_bytes, (Phase(latency, tuple(flows)),), "simple",
                          tuner_unseen_latency_s=fill_s)


def nvls_tree_servers(topology: Topology, ranks: tuple[int, ...]) -> list[tuple[list[int], str]] | None:
    """(ranks, NVSwitch) per server when a multi-server group can run NVLSTree."""
    servers = topology.ranks_by_server(ranks)
    if len(servers) < 2 or len({len(s) for s in servers}) != 1:
        return None
    switches = [nvls_switch(topology, tuple(s)) for s in servers]
    return None if None in switches else list(zip(servers, switches))


def nvls_tree_plan(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
                   protocol: str = "simple") -> CollectivePlan:
    """NVLSTree (NCCL 2.18+): NVLS inside each server, pipelined with an all-reduce across servers.

    Each GPU's reduced 1/k shard is all-reduced with the same shard of the
    other servers over the GPU's own NIC, while the switch reduces and
    multicasts; the stages overlap, so the slowest sets the time. Across servers
    NCCL runs its double binary tree (ncclGetDtree over the nodes,
    src/graph/connect.cc @v2.19.3-1), even channels on one tree and odd on the
    other, so each tree carries half of the shard up (reduce) and down
    (broadcast). A server inside one tree sends its half to its parent and to
    two children: 2 x S/k per NIC each way beyond two servers, against
    2(M-1)/M x S/k for a ring (NCCL's tuner halves NVLSTree's bwInter beyond two
    nodes, tuning.cc @v2.19.3-1 line 176); with two servers both give S/k.

    A net plugin's reported latency (collectives/protocol.py) enters as NCCL
    2.19+ counts NVLSTree's inter-node steps: 2 * log2(servers) of them, each
    taking it twice (Simple), on top of the step latencies below.

    NCCL's tuner caps NVLSTree's bus bandwidth per NVLS channel by GPU
    generation and server count (perChMaxNVLSTreeBws, NCCL 2.28.3's figures; 2.28.9
    raised Blackwell's beyond two nodes from 43.1 to 43.8 and 2.30 to 80.0): on Hopper
    57.7 GB/s a channel on two servers, so 8 heads reach ~462 GB/s busbw,
    about one server's NVLS busbw, not its algbw, whatever the NVLS stage's
    own rate. The cap rides on the switch flows (each moves S(k+1)/k), so the
    call cannot beat it.
    """
    groups = nvls_tree_servers(topology, ranks)
    if op != "all_reduce" or groups is None:
        raise ValueError("NVLSTree needs an all_reduce over servers with NVLS and equal GPU counts")
    k, m = len(groups[0][0]), len(groups)
    n = k * m
    arch = getattr(topology.gpu_spec, "arch", "")
    busbw_cap = max_nvls_tree_busbw_bytes_per_s(arch, m, channel_count(topology, [local for local, _ in groups]))
    port_cap = busbw_cap * n / (2 * (n - 1)) * (k + 1) / k     # the port rate at which the call runs at the cap
    flows: list[Flow] = []
    for local, switch in groups:
        flows += _switch_flows(topology, local, switch, size_bytes * (k + 1) / k, port_cap)
    half = size_bytes / k / 2
    trees = nccl_dtree_edges(m)
    for i in range(k):
        column = [local[i] for local, _ in groups]
        for parent, child in (e for tree in trees for e in tree):
            flows += [flow(topology, column[child], column[parent], half),      # reduce, upwards
                      flow(topology, column[parent], column[child], half)]      # broadcast, downwards
    plugin = plugin_latency_s(topology, [(groups[0][0][0], local[0]) for local, _ in groups[1:]])
    latency = (base_latency_s("nvls", "simple") + 2 * step_latency_s("nvlink", "ring", "simple")
               + 2 * (m - 1) * step_latency_s("net", "ring", "simple")
               + 2 * math.ceil(math.log2(m)) * 2 * plugin)
    return CollectivePlan(op, "nvls_tree", tuple(ranks), size_bytes, (Phase(latency, tuple(flows)),), "simple")
