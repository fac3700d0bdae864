"""Pick the algorithm and protocol for a collective, as NCCL's tuner does, and expand it.

NCCL predicts, for every algorithm and protocol it may use, time = latency +
size / bandwidth, and runs the fastest (ncclTopoGetAlgoTime). `auto` does the
same with our own prediction: each candidate plan is timed alone on the
topology with the fluid model (`estimate.plan_time_s`), so the choice sees the
real paths (host staging, NICs, switch uplinks). What NCCL's tuner does not
predict (NVLS's pipeline fill, `CollectivePlan.tuner_unseen_latency_s`) is left
out of the choice, as NCCL leaves it out, and kept in the call's time. Candidates:

- all_reduce: ring, tree, NVLS (one server on an NVSwitch with in-network
  reduction), NVLSTree (several such servers) -- NCCL's own set;
  `hierarchical` (three sequential phases, Horovod-style) only when asked for;
- reduce_scatter, all_gather, broadcast, reduce: ring;
- all_to_all, send_recv, send: direct;

each with LL, LL128 (only where every hop inside a server is NVLink, as NCCL
enables it by default) and Simple (NVLS: Simple only); on AMD GPUs RCCL's set
(LL and Simple; the tree only with LL inside one node). Ties go to the first
candidate in that order, so choices are deterministic.
"""

from __future__ import annotations

from scalesim.collectives.estimate import plan_time_bounds_s, plan_time_s
from scalesim.collectives.hierarchical import hierarchical_plan
from scalesim.collectives.nvls import nvls_plan, nvls_switch, nvls_tree_plan, nvls_tree_servers
from scalesim.collectives.p2p import p2p_plan
from scalesim.collectives.plan import CollectivePlan
from scalesim.collectives.library import library_of
from scalesim.collectives.protocol import PROTOCOLS, RCCL_PROTOCOLS
from scalesim.collectives.ring import ring_links, ring_plan
from scalesim.collectives.tree import tree_plan
from scalesim.errors import InputError
from scalesim.limits import check_time
from scalesim.topology import Topology

# Calls of at most this many bytes (a gradient norm, FP8 weights' amaxes) are latency-bound: the
# symmetric copies of a group that share its links would move their end by under 1.4 us on 25 GB/s
# NICs or faster (4 KiB over 8 sharers; 10-26 us on 10-25 GbE), so the builder plans them alone
# (parallel/builder.py _with_copies); planning a 1,024-server tree's copies cost ~90 ms a pipeline
# stage at 16,384 GPUs.
LATENCY_BOUND_BYTES = 4096

ALGOS = ("auto", "ring", "tree", "nvls", "nvls_tree", "hierarchical", "direct")
BUILDERS = {"ring": ring_plan, "tree": tree_plan, "nvls": nvls_plan, "nvls_tree": nvls_tree_plan,
            "hierarchical": hierarchical_plan, "direct": p2p_plan}
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "send_recv", "send")


def algorithms_for(op: str, topology: Topology, ranks: tuple[int, ...]) -> list[str]:
    """Algorithms that can run `op` on these ranks, in preference order for ties."""
    if op in ("all_to_all", "send_recv", "send"):
        return ["direct"]
    if op != "all_reduce":
        return ["ring"]
    algos = ["ring", "tree"]
    servers = topology.ranks_by_server(ranks)
    if nvls_switch(topology, ranks) is not None:
        algos.append("nvls")
    if nvls_tree_servers(topology, ranks) is not None:
        algos.append("nvls_tree")
    if len(servers) > 1 and len({len(s) for s in servers}) == 1 and len(servers[0]) > 1:
        algos.append("hierarchical")
    return algos


AUTO_EXCLUDED = ("hierarchical",)   # not an NCCL algorithm: used only when asked for


def protocols_for(algo: str, topology: Topology, ranks: tuple[int, ...]) -> list[str]:
    if algo == "nvls":
        return ["simple"]
    if library_of(topology, ranks) == "rccl":      # RCCL: no LL128 off MI200; no tree Simple in one MI300X node
        single = len(topology.ranks_by_server(ranks)) == 1
        return [p for p in RCCL_PROTOCOLS if not (algo == "tree" and single and p == "simple")]
    nvlink_inside = all(
        topology.link_class(s[i], s[i + 1]) == "nvlink"
        for s in topology.ranks_by_server(ranks) for i in range(len(s) - 1))
    return [p for p in PROTOCOLS if p != "ll128" or nvlink_inside]


def plan_collective(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float,
                    algo: str = "auto", protocol: str = "auto", memo: dict | None = None) -> CollectivePlan:
    """The collective expanded onto the topology with the chosen (or fastest) algorithm and protocol.

    `memo`: the caller's cache of plans on this topology (see scalesim/app/caches.py); None plans anew."""
    check_time()                    # a caller's wall-clock limit (scalesim/limits.py)
    ranks = tuple(ranks)
    if op not in OPS:
        raise InputError(f"unknown operation '{op}'; allowed: {', '.join(OPS)}", key="op")
    if algo not in ALGOS:
        raise InputError(f"unknown algorithm '{algo}'; allowed: {', '.join(ALGOS)}", key="algo")
    if protocol not in PROTOCOLS + ("auto",):
        raise InputError(f"unknown protocol '{protocol}'; allowed: auto, {', '.join(PROTOCOLS)}", key="protocol")
    key = ("plan", op, ranks, size_bytes, algo, protocol)
    if memo is not None and key in memo:
        return memo[key]
    candidates = _candidates(op, topology, ranks, algo, protocol, memo)
    if len(candidates) == 1:
        (a, p), = candidates
        best = _build(a, op, topology, ranks, size_bytes, p, memo)
    else:
        best = _fastest([_build(a, op, topology, ranks, size_bytes, p, memo) for a, p in candidates],
                        topology.capacity_bytes_per_s, memo)
    if memo is not None:
        memo[key] = best
    return best


def links_crossed(op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float, algo: str,
                  protocol: str, memo: dict | None = None) -> set:
    """The link resources the flows of `plan_collective(op, topology, ranks, size_bytes, algo, protocol,
    memo)` cross; for a ring of a given protocol, from its routes alone (`ring_links`: no flows, no
    latency), as the builder asks of the copies of every group (parallel/builder.py _sharing_copies)."""
    check_time()
    ranks = tuple(ranks)
    if algo == "ring" and _candidates(op, topology, ranks, algo, protocol, memo) == [("ring", protocol)]:
        return ring_links(op, topology, ranks, size_bytes, memo)
    plan = plan_collective(op, topology, ranks, size_bytes, algo, protocol, memo)
    return {link for phase in plan.phases for f in phase.flows for link in f.links}


def _candidates(op: str, topology: Topology, ranks: tuple[int, ...], algo: str, protocol: str,
                memo: dict | None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs `plan_collective` times, the same for every size (kept in `memo`)."""
    key = ("candidates", op, ranks, algo, protocol)
    if memo is not None and key in memo:
        return memo[key]
    possible = algorithms_for(op, topology, ranks)
    if algo != "auto" and algo not in possible:
        raise InputError(f"algorithm '{algo}' cannot run {op} on these GPUs; allowed here: "
                         f"auto, {', '.join(possible)}", key="algo")
    candidates = [(a, p) for a in ([a for a in possible if a not in AUTO_EXCLUDED] if algo == "auto" else [algo])
                  for p in (protocols_for(a, topology, ranks) if protocol == "auto" else [protocol])]
    if not candidates:
        raise InputError(f"protocol '{protocol}' is not available for {op} here", key="protocol")
    if memo is not None:
        memo[key] = candidates
    return candidates


def _fastest(plans: list[CollectivePlan], capacity, memo: dict | None) -> CollectivePlan:
    """The plan with the least tuner time (`plan_time_s` less `tuner_unseen_latency_s`; ties to the
    first). Plans whose time is surely above the upper bound of the one with the least latency
    (`plan_time_bounds_s`: a latency-bound call's candidates differ by their latencies, microseconds
    against nanoseconds of bytes) are not timed, nor is a plan left alone: the same choice, without
    the fluid model."""
    lows = [plan_time_bounds_s(plan, capacity, low_only=True)[0] - plan.tuner_unseen_latency_s for plan in plans]
    likely = lows.index(min(lows))
    ceiling = plan_time_bounds_s(plans[likely], capacity)[1] - plans[likely].tuner_unseen_latency_s
    left = [i for i, low in enumerate(lows) if not low > ceiling]
    if len(left) == 1:
        return plans[left[0]]
    return min((plan_time_s(plans[i], capacity, memo) - plans[i].tuner_unseen_latency_s, i, plans[i])
               for i in left)[2]


def _build(algo: str, op: str, topology: Topology, ranks: tuple[int, ...], size_bytes: float, protocol: str,
           memo: dict | None) -> CollectivePlan:
    """The plan of one algorithm and protocol; the ring keeps what every size shares in `memo`."""
    if algo == "ring":
        return ring_plan(op, topology, ranks, size_bytes, protocol, memo)
    return BUILDERS[algo](op, topology, ranks, size_bytes, protocol)

