"""All-to-all across servers through PXN (NCCL >= 2.12): rail-local network traffic, no byte added."""

import pytest

from scalesim.collectives import plan_collective
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30


def cluster(nodes: int):
    return build_cluster(load_node_design("dgx-h100"), nodes=nodes, fabric=Fabric("ib-ndr", 8, "rail-optimized"))


def server(t, gpu_name: str) -> int:
    return t.server_of(t.gpus.index(gpu_name))


def network_flows(t, plan):
    return [f for p in plan.phases for f in p.flows if server(t, f.src) != server(t, f.dst)]


def test_the_network_carries_exactly_what_each_server_sends_to_the_others():
    t = cluster(4)
    plan = plan_collective("all_to_all", t, tuple(range(32)), 1 * GiB, protocol="simple")
    one_server = plan_collective("all_to_all", t, tuple(range(8)), 1 * GiB, protocol="simple")
    per_pair = one_server.phases[0].flows[0].size_bytes * 8 / 32       # S/N on the wire, for N = 32
    sent_out: dict[int, float] = {}
    for f in network_flows(t, plan):
        sent_out[server(t, f.src)] = sent_out.get(server(t, f.src), 0.0) + f.size_bytes
    # each server's 8 GPUs send S/N to each of the 24 GPUs elsewhere, and nothing more leaves it
    assert sorted(sent_out) == [0, 1, 2, 3]
    assert all(v == pytest.approx(8 * 24 * per_pair) for v in sent_out.values())


def test_network_legs_stay_on_the_destinations_rail_one_aggregate_per_remote_gpu():
    t = cluster(4)
    plan = plan_collective("all_to_all", t, tuple(range(32)), 1 * GiB, protocol="simple")
    net = network_flows(t, plan)
    for f in net:
        assert f.src.split("/")[-1] == f.dst.split("/")[-1]           # same local GPU index: same rail
        assert not any("spine" in t.resource_names[link] for link in f.links)
    assert len(net) == 4 * 3 * 8
    assert len(plan.phases[0].flows) < 32 * 31                        # fewer flows than sender-receiver pairs
