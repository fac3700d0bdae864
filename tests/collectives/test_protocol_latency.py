"""NCCL 2.18+'s tuner latencies for the LL and LL128 protocols (src/graph/tuning.cc @v2.18.5-1)."""

import pytest

from scalesim.collectives import plan_collective
from scalesim.topology import build_cluster, load_node_design

MiB = 2**20


@pytest.mark.parametrize("protocol,base_us,per_step_us", [("ll", 6.6, 0.6), ("ll128", 14.0, 1.9)])
def test_a_ring_all_reduce_on_eight_nvlink_gpus_costs_nccl_2_18_latency(protocol, base_us, per_step_us):
    # ring all-reduce on 8 ranks: baseLat + 2(n-1) x hwLat[NVLINK], NCCL's ncclTopoTuneModel
    t = build_cluster(load_node_design("dgx-a100"))
    plan = plan_collective("all_reduce", t, tuple(range(8)), 1 * MiB, algo="ring", protocol=protocol)
    assert plan.phases[0].latency_s == pytest.approx((base_us + 14 * per_step_us) * 1e-6)


def test_a_tree_ll128_all_reduce_in_one_server_costs_nccl_2_18_latency():
    # tree: baseLat + 2 x (ppn - 1) x hwLat[NVLINK][TREE][LL128] = 14.0 + 2 x 7 x 1.25 us
    t = build_cluster(load_node_design("dgx-a100"))
    plan = plan_collective("all_reduce", t, tuple(range(8)), 1 * MiB, algo="tree", protocol="ll128")
    assert plan.phases[0].latency_s == pytest.approx((14.0 + 2 * 7 * 1.25) * 1e-6)
