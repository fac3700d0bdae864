"""Node designs a 2026 buyer compares (issue 24): they ship, build, and their collectives obey physics."""

import networkx as nx
import pytest

from scalesim.app.collective_bench import time_collective
from scalesim.collectives.ring import mesh_rings, ring_orders
from scalesim.errors import InputError
from scalesim.topology.design import NvlinkDesign
from scalesim.topology import Fabric, build_cluster, build_node_graph, builtin_topology_names, load_node_design

# shared/DESIGN.md, "Contracts added in the second round", Names.
SECOND_ROUND = ["dgx-a100-40gb", "a100-80gb-pcie-8", "hgx-b200", "gb200-nvl72", "mi300x-8",
                "rtx-pro-6000-8", "l40s-8"]
GB = 2**30


def test_second_round_designs_ship():
    assert set(SECOND_ROUND) <= set(builtin_topology_names())


@pytest.mark.parametrize("name", SECOND_ROUND)
def test_designs_build_into_connected_graphs_with_their_gpu_count(name):
    design = load_node_design(name)
    g = build_node_graph(design)
    assert nx.is_connected(g)
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu") == design.gpus


def test_nvl72_is_one_nvlink_domain_of_72_gpus():
    t = build_cluster(load_node_design("gb200-nvl72"))
    assert len(t.gpus) == 72
    # GPU 0 (tray 1) to GPU 71 (tray 18): one hop through the NVLink switch trays, no network.
    assert [t.graph.nodes[n]["kind"] for n in t.path(0, 71)] == ["gpu", "nvswitch", "gpu"]
    assert t.link_class(0, 71) == "nvlink"


def test_nvl72_all_reduce_beats_nine_hgx_b200_nodes_over_infiniband():
    # The same 72 Blackwell GPUs: one NVLink domain (1.8 TB/s per GPU) against 9 servers
    # whose all-reduce must cross 400 Gb/s NICs (50 GB/s per GPU).
    rack = build_cluster(load_node_design("gb200-nvl72"))
    nine = build_cluster(load_node_design("hgx-b200"), nodes=9, fabric=Fabric("ib-ndr"))
    size = 4 * GB
    assert time_collective(rack, "all_reduce", 72, size).time_s < time_collective(nine, "all_reduce", 72, size).time_s


def test_a_gpu_cannot_join_a_larger_nvlink_domain_than_it_supports():
    design = load_node_design("hgx-b200").model_copy(update={"gpus": 16})
    with pytest.raises(InputError) as err:
        build_node_graph(design)
    assert err.value.key == "gpus"


def test_mi300x_board_is_fully_connected_without_a_switch():
    t = build_cluster(load_node_design("mi300x-8"))
    for a in range(8):
        for b in range(8):
            if a != b:
                assert [t.graph.nodes[n]["kind"] for n in t.path(a, b)] == ["gpu", "gpu"]


def test_mesh_rings_use_every_arc_at_most_once():
    for n in range(2, 9):
        rings = mesh_rings(n)
        arcs = [(r[i], r[(i + 1) % n]) for r in rings for i in range(n)]
        assert len(arcs) == len(set(arcs))                        # arc-disjoint
        assert all(sorted(r) == list(range(n)) for r in rings)   # each visits every GPU once
    assert len(mesh_rings(8)) >= 4


def test_mesh_all_reduce_uses_several_links_and_more_links_never_hurt():
    t = build_cluster(load_node_design("mi300x-8"))
    assert len(ring_orders(t, tuple(range(8)))) > 1
    size = 1 * GB
    one_ring_time = 2 * 7 / 8 * size / t.bottleneck_bytes_per_s(0, 1)   # a single ring over one link each
    assert time_collective(t, "all_reduce", 8, size).time_s < one_ring_time
    faster = load_node_design("mi300x-8").model_copy(
        update={"nvlink": NvlinkDesign(fabric="mesh", link="xgmi-mi355")})   # 76.8 GB/s links, not 64
    assert (time_collective(build_cluster(faster), "all_reduce", 8, size).time_s
            <= time_collective(t, "all_reduce", 8, size).time_s)
