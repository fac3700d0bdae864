"""NCCL's protocols (LL, LL128, Simple) and its latency model.

NCCL moves data with one of three protocols (NCCL docs, "NCCL_PROTO"):
LL sends 8-byte lines carrying 4 bytes of data plus a flag, so it needs no
synchronisation but gets a fraction of the bandwidth; LL128 sends 128-byte
lines carrying 120 bytes; Simple sends large chunks behind memory fences
(full bandwidth, highest latency). We model a protocol by:

- wire bytes: the bytes a flow carries are the data divided by the
  protocol's bandwidth fraction, so the engine's link sharing sees the
  overhead;
- latency: a base cost per call plus a per-step cost by link class
  (NVLink, PCIe, network), per algorithm.

The constants are NCCL's own tuning model (src/graph/tuning.cc, the
`baseLat`, `hwLat` tables and the LL / LL128 / tree bandwidth factors of
`ncclTopoTuneModel`, NCCL 2.x), in microseconds; NVLS's base latency is the
23 us NCCL 2.19+ uses for NVLS and NVLSTree. Using NCCL's model for the
protocol overheads keeps `auto` choosing what NCCL chooses. The LL and LL128
latencies are those of NCCL 2.18.1 and later (unchanged to v2.29.7-1): per call
6.6 us (ring LL), 14.0 us (ring LL128), 6.8 / 14.0 us (tree LL / LL128), and
0.6 us per NVLink step for LL (tuning.cc @v2.18.5-1 lines 56-79; NCCL 2.8-2.17
had 3.6 / 10.0 / 4.4 / 4.4 and 0.47 / 0.52). The Simple entries keep the older
tables (tree Simple's per-step latency moved between 28 and 4 us across 2.18-2.23).

AMD GPUs run RCCL, NCCL's port, whose tuner differs (ROCm/rccl
src/graph/tuning.cc @0cbce2a): its per-call base latency is 12 us (LL, LL128)
and 17 us (Simple) for ring and tree; the 8-GPU MI300X xGMI boards
(src/graph/rome_models.cc, the fully connected 7-link models, `tuning=5`) take
0.8 us (LL) and 2.1 us (Simple) per ring step over xGMI (tree 0.9 / 2.3), and
rate LL at 0.08 (ring) and 0.06 (tree) of the Simple bus bandwidth
(`bwRatio`); LL128 is enabled only on MI200 (gfx90a), and the tree's Simple
protocol is disabled inside one MI300X node. `library="rccl"` selects those
figures (scalesim/collectives/library.py says which GPUs run RCCL); network
steps keep NCCL's figures. MI355X (gfx950) has no board model of its own in
RCCL's file: it is taken to behave as MI300X's (an assumption).

Net plugins (NCCL 2.18.1+, NVIDIA/nccl d97a32fa): NCCL copies the latency a
network device reports (ncclNetProperties_t.latency, src/graph/topo.cc) into
each graph's `latencyInter` (src/graph/search.cc) and adds it to the per-step
network latency of every algorithm: interLat = hwLat[NET] + latencyInter, plus
latencyInter once more for Simple ("the flush extra latency",
src/graph/tuning.cc). NCCL's own IB and socket transports report 0
(src/transport/net_ib.cc, net_socket.cc: `props->latency = 0; // Not set`), so
only plugin transports carry it: aws-ofi-nccl reports 75 us on p4d/p4de/p5/p5e
and 35 us on p5en/p6 (src/platform-aws.cpp platform_data_map @2daf7d30; first
set in d87d61e0, "Variable internode latency reported to NCCL", v1.7.0, whose
removed comment says the figure came from measured all-reduce latencies fitted
into NCCL's tuning model). Links carry it as `net_plugin_latency_s`.
"""

from __future__ import annotations

PROTOCOLS = ("ll", "ll128", "simple")
US = 1e-6

# Per-call base latency, us: (algorithm, protocol).
BASE_LATENCY_US = {
    ("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4,
    ("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 0.0,
    ("nvls", "simple"): 23.0,
}
# RCCL's per-call base latency, us (baseLat of ROCm/rccl src/graph/tuning.cc).
RCCL_BASE_LATENCY_US = {
    ("ring", "ll"): 12.0, ("ring", "ll128"): 12.0, ("ring", "simple"): 17.0,
    ("tree", "ll"): 12.0, ("tree", "ll128"): 12.0, ("tree", "simple"): 17.0,
}
# RCCL tuning model 5 (8x MI300X, xGMI mesh): per-step latency over xGMI, us.
RCCL_XGMI_STEP_LATENCY_US = {("tree", "ll"): 0.9, ("tree", "simple"): 2.3,
                             ("ring", "ll"): 0.8, ("ring", "simple"): 2.1}
# RCCL tuning model 5, bwRatio for up to two nodes: LL's share of the Simple bus bandwidth.
RCCL_LL_FRACTION = {"ring": 0.08, "tree": 0.06}
RCCL_PROTOCOLS = ("ll", "simple")          # LL128: gfx90a only

# Per-step latency by link class, us: class -> (algorithm, protocol).
STEP_LATENCY_US = {
    "nvlink": {("tree", "ll"): 0.6, ("tree", "ll128"): 1.25, ("tree", "simple"): 28.0,
               ("ring", "ll"): 0.6, ("ring", "ll128"): 1.9, ("ring", "simple"): 3.4},
    "pci": {("tree", "ll"): 1.0, ("tree", "ll128"): 1.9, ("tree", "simple"): 28.0,
            ("ring", "ll"): 1.0, ("ring", "ll128"): 2.5, ("ring", "simple"): 5.7},
    "net": {("tree", "ll"): 5.0, ("tree", "ll128"): 8.5, ("tree", "simple"): 50.0,
            ("ring", "ll"): 2.7, ("ring", "ll128"): 4.0, ("ring", "simple"): 9.6},
}


def bandwidth_fraction(algo: str, protocol: str, op: str, multi_node: bool, library: str = "nccl") -> float:
    """Fraction of the Simple protocol's bandwidth a protocol reaches (NCCL's or RCCL's tuning factors)."""
    if library == "rccl" and protocol == "ll":
        return RCCL_LL_FRACTION["tree" if algo == "tree" else "ring"]
    if algo == "tree":
        tree = 0.9   # NCCL: busBw * .9 for trees
        if protocol == "simple":
            return tree
        return tree * (1 / 3.8 if protocol == "ll" else (0.915 if multi_node else 7 / 9))
    if protocol == "simple":
        return 1.0
    if protocol == "ll":
        return 1 / 4 if (multi_node or op in ("all_reduce", "reduce")) else 1 / 3
    return 0.92  # LL128: 120 of 128 bytes carry data


def base_latency_s(algo: str, protocol: str, library: str = "nccl") -> float:
    table = RCCL_BASE_LATENCY_US if library == "rccl" else BASE_LATENCY_US
    return table.get((algo, protocol), table[("ring", protocol)]) * US


def net_step_latency_s(algo: str, protocol: str, plugin_latency_s: float, library: str = "nccl") -> float:
    """One inter-node step: NCCL's network hwLat plus the net plugin's reported latency, twice for Simple."""
    return step_latency_s("net", algo, protocol, library) + plugin_latency_s * (2 if protocol == "simple" else 1)


def step_latency_s(link_class: str, algo: str, protocol: str, library: str = "nccl") -> float:
    if library == "rccl" and link_class == "nvlink" and (algo, protocol) in RCCL_XGMI_STEP_LATENCY_US:
        return RCCL_XGMI_STEP_LATENCY_US[(algo, protocol)] * US
    table = STEP_LATENCY_US[link_class]
    return table.get((algo, protocol), table[("ring", protocol)]) * US
