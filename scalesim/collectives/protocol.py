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
protocol overheads keeps `auto` choosing what NCCL chooses.
"""

from __future__ import annotations

PROTOCOLS = ("ll", "ll128", "simple")
US = 1e-6

# Per-call base latency, us: (algorithm, protocol).
BASE_LATENCY_US = {
    ("ring", "ll"): 3.6, ("ring", "ll128"): 10.0, ("ring", "simple"): 8.4,
    ("tree", "ll"): 4.4, ("tree", "ll128"): 4.4, ("tree", "simple"): 0.0,
    ("nvls", "simple"): 23.0,
}
# Per-step latency by link class, us: class -> (algorithm, protocol).
STEP_LATENCY_US = {
    "nvlink": {("tree", "ll"): 0.52, ("tree", "ll128"): 1.2, ("tree", "simple"): 28.0,
               ("ring", "ll"): 0.47, ("ring", "ll128"): 1.9, ("ring", "simple"): 3.4},
    "pci": {("tree", "ll"): 1.0, ("tree", "ll128"): 1.9, ("tree", "simple"): 28.0,
            ("ring", "ll"): 1.0, ("ring", "ll128"): 2.5, ("ring", "simple"): 5.7},
    "net": {("tree", "ll"): 5.0, ("tree", "ll128"): 8.5, ("tree", "simple"): 50.0,
            ("ring", "ll"): 2.7, ("ring", "ll128"): 4.0, ("ring", "simple"): 9.6},
}


def bandwidth_fraction(algo: str, protocol: str, op: str, multi_node: bool) -> float:
    """Fraction of the Simple protocol's bandwidth a protocol reaches (NCCL's tuning factors)."""
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


def base_latency_s(algo: str, protocol: str) -> float:
    return BASE_LATENCY_US.get((algo, protocol), BASE_LATENCY_US[("ring", protocol)]) * US


def step_latency_s(link_class: str, algo: str, protocol: str) -> float:
    table = STEP_LATENCY_US[link_class]
    return table.get((algo, protocol), table[("ring", protocol)]) * US
