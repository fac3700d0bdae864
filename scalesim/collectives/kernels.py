"""How many SMs NCCL's kernels hold on each GPU while a collective runs.

One NCCL channel is one CUDA block: `ncclLaunchKernel` launches a grid of
nChannels blocks (src/enqueue.cc). Those blocks (up to 640 threads at 96
registers each, nearly a whole register file) do not share an SM with compute
kernels ("NCCL CTAs won't share an SM with compute kernels", S. Jeaugey,
NVIDIA/nccl#689). So while a call runs, compute on the same GPU has the other
SMs. Channel counts, as NCCL logs them on real machines:

- NVLink inside a server: two per NVLink, at most 24. 8x H100 24 ("Trees [0]
  .. [23]", nccl#2094); 2x H100 PCIe on a bridge 24 (nccl#1161); 8x H800
  (8 NVLinks) 16 ("16 coll channels", nccl#892). The link count is the path's
  bandwidth over NCCL's 20 GB/s per NVLink (src/graph/topo.h); the rule
  reproduces those three, gives 24 on an 8x A100 NVSwitch board (12 links), and
  is an inference for bridges with fewer links.
- NVLS (in-switch reduction): 16, NCCL_NVLS_NCHANNELS' default (nccl#2094).
- across servers: two per NIC in use ("on DGX with 8 NICs ... it would use 16
  SMs", "a PCI system with a single NIC ... 2 SMs", nccl#689).
- through host memory (no peer-to-peer, SHM transport): 2 (8x RTX 4090,
  nccl-tests#307; 8x A100 with P2P off, nccl-tests#228).
- PCIe peer-to-peer: 4 (channels 00-03 in a 3x RTX 4090 patched-driver log,
  tinygrad/open-gpu-kernel-modules#17; inferred from one log).
- send/recv across servers: 2 (NCCL_NCHANNELS_PER_NET_PEER, nccl#1424);
  inside a server, the figure of its link.

NCCL uses fewer channels for small messages (nccl#1216): rings and trees drop a
channel while the message is below nChannels x threads x 64 B (Simple; 8 B for
LL128), src/enqueue.cc getAlgoInfo @v2.18.5-1, i.e. below ~786 KiB for 24
channels of 512 threads; not modelled, as such calls are short. NVLS keeps its 16. This is the SM share alone; the HBM bandwidth the call's
data takes from overlapped compute (nccl#1428, nccl#1433) is priced in the same
per-task factors by parallel/hbm_contention.py.

A communicator can be given fewer CTAs than that (ncclConfig_t.maxCTAs, NCCL_MAX_CTAS;
NVIDIA's MLPerf recipes set them per communicator through Megatron-Core's NCCL_CFG_PATH
yaml). How NCCL cuts, read at v2.28.3-1 (f1308997, the NCCL NVIDIA's 25.09 MLPerf NeMo
image builds):

- The ring search finds up to MAXCHANNELS/2 = 32 search channels (init.cc:923), each
  entering and leaving a node through a NIC pair at a speed-table bandwidth (48 GB/s for a
  400G NIC on sm90/sm100, search.cc:963); on sm90+ ncclTopoDupChannels leaves them whole
  when that is below 50 GB/s and there are more than 4 (search.cc:941). connectRings then
  runs each on two CTAs, channels c and c+n sharing one ring and its NICs (connect.cc:
  443-452), hence two per NIC ("having two channels per NIC makes the NIC utilization
  closer to peak", S. Jeaugey, nccl#438), and four below 16 channels across nodes at
  over 45 GB/s a search channel on sm90+ (connect.cc:472-475; not modelled).
- With MNNVL an NVLink domain is one node: each rank's topology fuses the clique's trays
  (topo.cc:1480), so a ring crosses each rack boundary once per channel through one NIC,
  and the channels are spread GPU first over the rack's NICs (search.cc:507-514).
- maxCTAs keeps the first maxCTAs channels (connect.cc:487-491). Below the search count
  those are distinct search channels: each kept CTA is alone on its own NIC pair, and a
  NIC carries what its one channel carries. NCCL's tuning model does not see the cut
  (tuning.cc:301 busBw = search channels x their bandwidth).
- NCCL_MIN_CTAS / NCCL_MAX_CTAS in the environment replace the config's minCTAs /
  maxCTAs (init.cc:1614-1627, applied after the config at 1868-1879, and to ncclCommSplit
  children at 2427-2429): an exported NCCL_MAX_CTAS overrides every per-communicator limit.

What one CTA pushes through a NIC it has alone is not in the code. The model keeps one
CTA at half a NIC, the share NCCL's default gives it (cta_bytes_per_s; "the speed of a
single channel (single GPU SM) is 24GB/s", a user in nccl#1302); a whole NIC per CTA is
the other bound. `cta_limited` gives each CTA the path's bandwidth over the default count,
and each GPU's flows share its capped CTAs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from scalesim.collectives.plan import CollectivePlan, Phase
from scalesim.topology import Topology

MAX_NVLINK_CHANNELS = 24
NVLINK_CHANNEL_BYTES_PER_S = 20e9       # NCCL's per-NVLink bandwidth in its topology search
NVLS_CHANNELS = 16
CHANNELS_PER_NIC = 2
NET_P2P_CHANNELS = 2
SHM_CHANNELS = 2
PCIE_P2P_CHANNELS = 4


def _intra_server_channels(topology: Topology, a: int, b: int) -> int:
    cls = topology.link_class(a, b)
    if cls == "nvlink":
        links = round(topology.bottleneck_bytes_per_s(a, b) / NVLINK_CHANNEL_BYTES_PER_S)
        return max(2, min(MAX_NVLINK_CHANNELS, 2 * links))
    return SHM_CHANNELS if topology.via_host_memory(a, b) else PCIE_P2P_CHANNELS


def nccl_blocks(plan: CollectivePlan, topology: Topology) -> int:
    """CUDA blocks (one SM each) NCCL runs on every GPU of the call while it lasts."""
    ranks = plan.ranks
    if len(ranks) < 2:
        return 0
    if plan.algo in ("nvls", "nvls_tree"):
        return NVLS_CHANNELS
    servers = topology.ranks_by_server(ranks)
    if len(servers) > 1:
        if plan.op in ("send", "send_recv"):
            return NET_P2P_CHANNELS
        nics = min(topology.nic_count(topology.server_of(s[0])) for s in servers)
        return CHANNELS_PER_NIC * max(1, min(nics, min(len(s) for s in servers)))
    return _intra_server_channels(topology, ranks[0], ranks[1])


def sm_share(plan: CollectivePlan, topology: Topology, sms: int, max_ctas: int | None = None) -> float:
    """The fraction of a GPU's `sms` the call's kernels hold (at most `max_ctas` blocks);
    0 when the SM count is unknown."""
    if sms <= 0:
        return 0.0
    blocks = nccl_blocks(plan, topology)
    return min((blocks if max_ctas is None else min(blocks, max_ctas)) / sms, 1.0)


def cta_bytes_per_s(plan: CollectivePlan, topology: Topology) -> float:
    """What one CTA of the call carries in NCCL's channel model: the bandwidth of the path its
    default blocks fill (a NIC per CHANNELS_PER_NIC blocks across servers, else the GPUs' link)
    over that default count."""
    a, b = plan.ranks[0], plan.ranks[1]
    servers = topology.ranks_by_server(plan.ranks)
    if len(servers) > 1:
        a, b = servers[0][0], servers[1][0]
        return topology.bottleneck_bytes_per_s(a, b) / (NET_P2P_CHANNELS if plan.op in ("send", "send_recv")
                                                        else CHANNELS_PER_NIC)
    return topology.bottleneck_bytes_per_s(a, b) / nccl_blocks(plan, topology)


def cta_limited(plan: CollectivePlan, topology: Topology, max_ctas: int | None) -> CollectivePlan:
    """The call run on at most `max_ctas` CTAs per GPU: unchanged at or above NCCL's default
    count (and for NVLS, whose channels NCCL_NVLS_NCHANNELS sets), else each GPU's flows in
    a phase share max_ctas x `cta_bytes_per_s` (each flow is one channel's edge)."""
    if (max_ctas is None or len(plan.ranks) < 2 or plan.algo in ("nvls", "nvls_tree")
            or nccl_blocks(plan, topology) <= max_ctas):
        return plan
    rate = max_ctas * cta_bytes_per_s(plan, topology)
    phases = []
    for phase in plan.phases:
        out = Counter(f.src for f in phase.flows)
        phases.append(Phase(phase.latency_s, tuple(
            replace(f, rate_cap_bytes_per_s=min(f.rate_cap_bytes_per_s, rate / out[f.src])) for f in phase.flows)))
    return replace(plan, phases=tuple(phases))
