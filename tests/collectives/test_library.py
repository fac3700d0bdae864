"""RCCL on AMD boards: the protocols and latencies of its own tuner (ROCm/rccl src/graph/tuning.cc)."""

import pytest

from scalesim.collectives import plan_collective, plan_time_s
from scalesim.collectives.library import library_of
from scalesim.topology import build_cluster, load_node_design


def cluster(name):
    return build_cluster(load_node_design(name))


def test_amd_boards_run_rccl_and_nvidia_boards_nccl():
    assert library_of(cluster("mi300x-8"), tuple(range(8))) == "rccl"
    assert library_of(cluster("mi355x-8"), tuple(range(8))) == "rccl"
    assert library_of(cluster("dgx-h100"), tuple(range(8))) == "nccl"


@pytest.mark.parametrize("size", [2**16, 2**20, 2**24, 2**30])
def test_rccl_never_picks_ll128_nor_the_tree_with_simple_inside_one_mi300x_node(size):
    plan = plan_collective("all_reduce", cluster("mi300x-8"), tuple(range(8)), size)
    assert plan.protocol != "ll128"
    assert not (plan.algo == "tree" and plan.protocol == "simple")


def test_a_small_all_reduce_on_mi300x_pays_rccl_latency():
    """RCCL's ring Simple: 17 us per call + 2.1 us per xGMI step, 14 steps for 8 ranks (tuning model 5)."""
    topology = cluster("mi300x-8")
    plan = plan_collective("all_reduce", topology, tuple(range(8)), 2**20, algo="ring", protocol="simple")
    assert plan_time_s(plan, topology.capacity_bytes_per_s) >= (17 + 14 * 2.1) * 1e-6


def test_more_bytes_never_take_less_time_under_rccl():
    topology = cluster("mi300x-8")
    times = [plan_time_s(plan_collective("all_reduce", topology, tuple(range(8)), 2**k), topology.capacity_bytes_per_s)
             for k in range(10, 31, 2)]
    assert times == sorted(times)


def test_a_large_all_reduce_on_mi300x_moves_at_the_pace_of_the_slowest_xgmi_link():
    """AMD's TransferBench all-to-all on an 8x MI300X board measures 45.10-47.18 GB/s per xGMI link, and a collective,
    which splits its data evenly over the 7 links of every GPU, is capped at 7 x the slowest (GPU 0's: 45.21 GB/s,
    316.5 GB/s; ROCm/rocm-blogs mi300x-rccl-xgmi, 2 Mar 2025)."""
    from scalesim.collectives.busbw import busbw_bytes_per_s

    topology = cluster("mi300x-8")
    size = 8 * 2**30
    plan = plan_collective("all_reduce", topology, tuple(range(8)), size)
    busbw_gbps = busbw_bytes_per_s("all_reduce", 8, size, plan_time_s(plan, topology.capacity_bytes_per_s)) / 1e9
    slowest_links = (45.095, 45.21)   # slowest of the 56 links; GPU 0's slowest (the post's example)
    assert 7 * slowest_links[0] * 0.97 <= busbw_gbps <= 7 * slowest_links[1]
