"""Collective algorithms on real topologies: closed forms, crossovers, conservation."""

import networkx as nx
import pytest

from scalesim.collectives import busbw_bytes_per_s, plan_collective, plan_time_s
from scalesim.collectives.tree import MAX_TREE_BUSBW_BYTES_PER_S
from scalesim.engine import simulate
from scalesim.hardware import get_link
from scalesim.program import CollectiveTask, Program
from scalesim.topology import Fabric, Topology, build_cluster, load_node_design

GiB, MiB, KiB = 2**30, 2**20, 2**10


def engine_time(topology, plan):
    timeline = simulate(Program({r: (CollectiveTask("c", "k", plan),) for r in plan.ranks},
                                topology.capacity_bytes_per_s))
    assert timeline.bytes_sent == pytest.approx(timeline.bytes_delivered)
    return timeline.end_s


def star(n: int, link_name: str = "pcie-gen3") -> Topology:
    """n GPUs on one non-blocking switch: every GPU has one port of `link_name`."""
    link = get_link(link_name)
    g = nx.Graph()
    g.add_node("switch", kind="nvswitch", server=0, link=None, in_network_reduction=False)
    for i in range(n):
        g.add_node(f"gpu{i}", kind="gpu", socket=0, index=i, p2p=True, server=0)
        g.add_edge(f"gpu{i}", "switch", link=link, duplex=True)
    return Topology(g, "star")


def cluster(name: str, nodes: int, fabric: str, nics: int = 8) -> Topology:
    return build_cluster(load_node_design(name), nodes=nodes, fabric=Fabric(fabric, nics, "rail-optimized"))


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_engine_agrees_with_the_closed_form_on_a_switch(algo):
    t = star(8)
    port = get_link("pcie-gen3")
    bw = port.bw_bytes_per_s * port.efficiency
    size = 1 * GiB
    plan = plan_collective("all_reduce", t, tuple(range(8)), size, algo=algo, protocol="simple")
    latency = plan.phases[0].latency_s
    if algo == "ring":
        expected = latency + 2 * 7 / 8 * size / bw
    else:   # interior GPUs of both chains send S/2 up and S/2 down per tree; trees run at 0.9
        expected = latency + 2 * size / (0.9 * bw)
    assert engine_time(t, plan) == pytest.approx(expected, rel=0.01)
    assert plan_time_s(plan, t.capacity_bytes_per_s) == pytest.approx(expected, rel=0.01)


def test_tree_is_held_to_ncccl_tuner_cap_on_fast_links():
    t = build_cluster(load_node_design("dgx-h100"))
    plan = plan_collective("all_reduce", t, tuple(range(8)), 1 * GiB, algo="tree", protocol="simple")
    algbw = GiB / (engine_time(t, plan) - plan.phases[0].latency_s)
    assert algbw == pytest.approx(MAX_TREE_BUSBW_BYTES_PER_S[False] / 2, rel=0.01)


def test_across_two_nodes_a_tree_is_held_to_ncccl_per_channel_cap_with_one_channel_per_nic():
    # 2 DGX A100 with 4 HDR NICs: 4 channels x 23.6 GB/s of NCCL busBw (Ampere, two nodes),
    # i.e. algbw 47.2 GB/s; without the cap the tree would run at the NICs' rate.
    t = cluster("dgx-a100", 2, "ib-hdr", nics=4)
    plan = plan_collective("all_reduce", t, tuple(range(16)), 1 * GiB, algo="tree", protocol="simple")
    algbw = GiB / (engine_time(t, plan) - plan.phases[0].latency_s)
    assert algbw == pytest.approx(4 * 23.6e9 / 2, rel=0.01)


def test_ring_beats_tree_at_large_sizes_and_tree_beats_ring_at_small_ones_on_many_gpus():
    t = cluster("dgx-a100", 8, "ib-hdr")
    ranks = tuple(range(64))
    def time(algo, size):
        return engine_time(t, plan_collective("all_reduce", t, ranks, size, algo=algo))
    assert time("ring", 4 * GiB) < time("tree", 4 * GiB)
    assert time("tree", 16 * KiB) < time("ring", 16 * KiB)


@pytest.mark.parametrize("topology,nodes,algo", [
    ("dgx-a100", 1, "ring"), ("dgx-h100", 1, "nvls"), ("dgx-a100", 2, "tree"),
    ("dgx-a100", 2, "hierarchical"), ("dgx-h100", 2, "nvls_tree"), ("rtx4090-pcie-8", 1, "ring"),
])
def test_bytes_sent_equal_bytes_received_and_the_estimate_matches_the_engine(topology, nodes, algo):
    t = cluster(topology, nodes, "ib-ndr") if nodes > 1 else build_cluster(load_node_design(topology))
    plan = plan_collective("all_reduce", t, tuple(range(len(t.gpus))), 256 * MiB, algo=algo)
    assert engine_time(t, plan) == pytest.approx(plan_time_s(plan, t.capacity_bytes_per_s), rel=0.01)


def received_by(plan):
    got = {}
    for phase in plan.phases:
        for f in phase.flows:
            got[f.dst] = got.get(f.dst, 0.0) + f.size_bytes
    return got


def test_broadcast_delivers_the_whole_buffer_to_every_other_rank():
    t = star(6)
    plan = plan_collective("broadcast", t, tuple(range(6)), 1 * MiB, protocol="simple")
    got = received_by(plan)
    assert sorted(got.values()) == [1 * MiB] * 5            # the root receives nothing
    assert "gpu0" not in got


def test_all_gather_delivers_the_other_ranks_shards_to_each_rank():
    t = star(4)
    plan = plan_collective("all_gather", t, tuple(range(4)), 4 * MiB, protocol="simple")
    assert all(v == pytest.approx(3 / 4 * 4 * MiB) for v in received_by(plan).values())
    assert len(received_by(plan)) == 4


def test_all_to_all_sends_a_shard_to_every_peer_and_reaches_the_port_bandwidth():
    t = build_cluster(load_node_design("dgx-a100"))
    plan = plan_collective("all_to_all", t, tuple(range(8)), 1 * GiB, protocol="simple")
    flows = plan.phases[0].flows
    assert len(flows) == 8 * 7 and all(f.size_bytes == GiB / 8 for f in flows)
    port = get_link("nvlink3")
    busbw = busbw_bytes_per_s("all_to_all", 8, GiB, engine_time(t, plan) - plan.phases[0].latency_s)
    assert busbw == pytest.approx(port.bw_bytes_per_s * port.efficiency, rel=0.01)


def test_nvls_only_where_the_switch_reduces_and_it_beats_the_ring_there():
    h100 = build_cluster(load_node_design("dgx-h100"))
    a100 = build_cluster(load_node_design("dgx-a100"))
    with pytest.raises(Exception, match="cannot run"):
        plan_collective("all_reduce", a100, tuple(range(8)), GiB, algo="nvls")
    ring = engine_time(h100, plan_collective("all_reduce", h100, tuple(range(8)), GiB, algo="ring"))
    nvls = engine_time(h100, plan_collective("all_reduce", h100, tuple(range(8)), GiB, algo="nvls"))
    assert nvls < ring


@pytest.mark.parametrize("size", [8, 64 * KiB, 8 * MiB, 1 * GiB])
def test_auto_is_never_slower_than_any_algorithm_it_could_pick(size):
    t = cluster("dgx-h100", 2, "ib-ndr")
    ranks = tuple(range(16))
    auto = plan_time_s(plan_collective("all_reduce", t, ranks, size), t.capacity_bytes_per_s)
    for algo in ("ring", "tree", "nvls_tree"):
        for protocol in ("ll", "simple"):
            if algo == "nvls_tree" and protocol != "simple":
                continue
            other = plan_collective("all_reduce", t, ranks, size, algo=algo, protocol=protocol)
            assert auto <= plan_time_s(other, t.capacity_bytes_per_s) * (1 + 1e-12)


def test_small_messages_are_latency_bound_and_busbw_rises_with_size():
    t = build_cluster(load_node_design("dgx-a100"))
    sizes = [2**k for k in range(3, 31, 3)]
    busbw = [busbw_bytes_per_s("all_reduce", 8, s, engine_time(t, plan_collective("all_reduce", t, tuple(range(8)), s)))
             for s in sizes]
    assert busbw == sorted(busbw)
    assert busbw[0] < 0.01 * busbw[-1]


def test_crossing_nodes_goes_through_nics_with_gpudirect_on_hgx_and_host_memory_on_4090():
    h = cluster("dgx-h100", 2, "ib-ndr")
    kinds = [h.graph.nodes[n]["kind"] for n in h.path(0, 8)]
    assert kinds[:3] == ["gpu", "pcie_switch", "nic"] and "host_memory" not in kinds
    r = build_cluster(load_node_design("rtx4090-pcie-8"), nodes=2, fabric=Fabric("eth-100g", 1, "single-switch"))
    kinds = [r.graph.nodes[n]["kind"] for n in r.path(0, 8)]
    assert "host_memory" in kinds and "fabric_switch" in kinds


def test_inter_node_ring_uses_every_nic():
    t = cluster("dgx-a100", 2, "ib-hdr", nics=4)
    plan = plan_collective("all_reduce", t, tuple(range(16)), GiB, algo="ring", protocol="simple")
    used = {t.resource_names[r].split("->")[0] for f in plan.phases[0].flows for r in f.links
            if "nic" in t.resource_names[r].split("->")[0] and "fabric" in t.resource_names[r]}
    assert len(used) == 8   # 4 NICs on each of the 2 nodes send into the fabric
