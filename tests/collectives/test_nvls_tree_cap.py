"""NCCL's per-channel cap on NVLSTree's bus bandwidth (perChMaxNVLSTreeBws, src/graph/tuning.cc @v2.28.3-1)."""

import pytest

from scalesim.collectives import plan_collective, plan_time_s
from scalesim.collectives.busbw import busbw_bytes_per_s
from scalesim.collectives.nvls import max_nvls_tree_busbw_bytes_per_s
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30


def busbw(node: str, servers: int, link: str = "ib-ndr", nics: int = 8, algo: str = "nvls_tree",
          size: float = 8 * GiB) -> float:
    t = build_cluster(load_node_design(node), nodes=servers, fabric=Fabric(link, nics))
    ranks = tuple(range(len(t.gpus)))
    time_s = plan_time_s(plan_collective("all_reduce", t, ranks, size, algo), t.capacity_bytes_per_s)
    return busbw_bytes_per_s("all_reduce", len(ranks), size, time_s)


def test_the_cap_is_nccls_per_channel_figure_times_one_channel_a_nic():
    # Hopper: 57.7 GB/s a channel on two nodes, 45.5 beyond; Blackwell 96.0 / 43.1
    assert max_nvls_tree_busbw_bytes_per_s("hopper", 2, 8) == pytest.approx(8 * 57.7e9)
    assert max_nvls_tree_busbw_bytes_per_s("hopper", 4, 8) == max_nvls_tree_busbw_bytes_per_s("hopper", 32, 8)
    assert max_nvls_tree_busbw_bytes_per_s("blackwell", 2, 4) == pytest.approx(4 * 96.0e9)
    assert max_nvls_tree_busbw_bytes_per_s("hopper", 1, 8) == float("inf")      # no NVLSTree on one node
    assert max_nvls_tree_busbw_bytes_per_s("ampere", 2, 8) == float("inf")      # no NVLS before Hopper


@pytest.mark.parametrize("servers", [2, 4, 8])
def test_hopper_nvls_tree_never_beats_its_cap(servers):
    assert busbw("dgx-h100", servers) <= max_nvls_tree_busbw_bytes_per_s("hopper", servers, 8) * (1 + 1e-9)


def test_two_hopper_servers_run_at_about_one_servers_nvls_busbw_not_above_it():
    # measured two-server NVLSTree busbw sits at one server's NVLS busbw (~478 GB/s), not at its algbw x 15/8
    one = busbw("dgx-h100", 1, algo="nvls")
    two = busbw("dgx-h100", 2)
    assert two <= one * 1.0


def test_the_cap_leaves_one_server_nvls_alone():
    t = build_cluster(load_node_design("dgx-h100"), nodes=1, fabric=Fabric("ib-ndr", 8))
    plan = plan_collective("all_reduce", t, tuple(range(8)), GiB, "nvls")
    assert all(f.rate_cap_bytes_per_s > 8 * 57.7e9 / 2 for phase in plan.phases for f in phase.flows)


def test_fewer_nics_are_never_faster_under_the_cap():
    times = [busbw("dgx-h100", 2, nics=nics) for nics in (2, 4, 8)]
    assert times == sorted(times)


def test_a_nic_bound_blackwell_pair_is_below_its_cap():
    # two B200 servers on 8 x 400G: the NICs bind (algbw ~0.96 x 400 GB/s), under 8 x 96 GB/s busbw
    assert busbw("hgx-b200", 2) < max_nvls_tree_busbw_bytes_per_s("blackwell", 2, 8)
    assert busbw("hgx-b200", 2, link="ib-xdr") > busbw("hgx-b200", 2)             # faster NICs still help
