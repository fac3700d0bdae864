"""`auto`'s shortcut (collectives/select.py _fastest): candidates whose latency alone puts them above
another's upper bound are not timed with the fluid model, and the choice is the one timing every
candidate gives (issue 20: a 16,384-GPU step plans a 4-byte gradient-norm all-reduce per pipeline stage
over 128 servers, and timing its six candidates cost ~30 ms each)."""

import pytest

from scalesim.collectives import estimate, plan_collective, plan_time_s
from scalesim.collectives.estimate import plan_time_bounds_s
from scalesim.collectives.select import AUTO_EXCLUDED, algorithms_for, protocols_for
from scalesim.topology import Fabric, build_cluster, load_node_design

SIZES = (4.0, 4096.0, 2.0**20, 2.0**30)


@pytest.fixture(scope="module")
def clusters():
    return {
        "h100-roce-rail": build_cluster(load_node_design("dgx-h100"), nodes=32,
                                        fabric=Fabric("roce-400g", 8, "rail-optimized")),
        "a100-ib-fat-tree": build_cluster(load_node_design("dgx-a100"), nodes=8,
                                          fabric=Fabric("ib-hdr", 8, "fat-tree", 2.0)),
        "4090-pcie": build_cluster(load_node_design("rtx4090-pcie-8"), nodes=1),
        "mi300x": build_cluster(load_node_design("mi300x-8"), nodes=2, fabric=Fabric("roce-400g", 8, "fat-tree")),
    }


GROUPS = {                                   # (cluster, ranks): one GPU a server, whole servers, one server
    "h100 dp over 32 servers": ("h100-roce-rail", tuple(range(0, 256, 8))),
    "h100 dp over 8 servers, rail 3": ("h100-roce-rail", tuple(range(3, 64, 8))),
    "h100 4 whole servers": ("h100-roce-rail", tuple(range(32))),
    "h100 one server": ("h100-roce-rail", tuple(range(8))),
    "a100 8 servers": ("a100-ib-fat-tree", tuple(range(0, 64, 8))),
    "a100 2 whole servers": ("a100-ib-fat-tree", tuple(range(16))),
    "4090 PCIe": ("4090-pcie", tuple(range(8))),
    "mi300x 2 servers": ("mi300x", tuple(range(16))),
}


def _timing_every_candidate(topology, ranks, size):
    """The choice as `auto` made it before the shortcut: every candidate timed, ties to the first."""
    plans = [plan_collective("all_reduce", topology, ranks, size, a, p)
             for a in algorithms_for("all_reduce", topology, ranks) if a not in AUTO_EXCLUDED
             for p in protocols_for(a, topology, ranks)]
    return min((plan_time_s(plan, topology.capacity_bytes_per_s) - plan.tuner_unseen_latency_s, i, plan)
               for i, plan in enumerate(plans))[2], plans


@pytest.mark.parametrize("group", GROUPS)
def test_shortcut_chooses_what_timing_every_candidate_chooses(clusters, group):
    name, ranks = GROUPS[group]
    topology = clusters[name]
    for size in SIZES:
        full, candidates = _timing_every_candidate(topology, ranks, size)
        assert len(candidates) > 1
        for memo in (None, {}):
            chosen = plan_collective("all_reduce", topology, ranks, size, memo=memo)
            assert (chosen.algo, chosen.protocol) == (full.algo, full.protocol), (group, size)
            assert chosen == full


@pytest.mark.parametrize("group", GROUPS)
def test_bounds_hold_the_computed_time(clusters, group):
    name, ranks = GROUPS[group]
    topology = clusters[name]
    for size in SIZES:
        for plan in _timing_every_candidate(topology, ranks, size)[1]:
            low, high = plan_time_bounds_s(plan, topology.capacity_bytes_per_s)
            timed = plan_time_s(plan, topology.capacity_bytes_per_s)
            assert low <= timed <= high
            assert low == sum(phase.latency_s for phase in plan.phases)


def test_latency_bound_call_over_many_servers_is_chosen_without_the_fluid_model(clusters, monkeypatch):
    """A 4-byte all-reduce over 32 servers: ring and tree, three protocols each, apart by their latency
    (microseconds) while the bytes take nanoseconds: nothing needs the max-min rates."""
    calls = []
    original = estimate.max_min_rates
    monkeypatch.setattr(estimate, "max_min_rates", lambda *a, **k: calls.append(1) or original(*a, **k))
    plan = plan_collective("all_reduce", clusters["h100-roce-rail"], GROUPS["h100 dp over 32 servers"][1], 4.0)
    assert plan.algo == "tree"           # log2 hops beat a ring's 2 (n - 1) steps on 32 servers
    assert calls == []
