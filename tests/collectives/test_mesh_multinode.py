"""Rings across servers of AMD's fully connected xGMI boards, as RCCL builds them (rome_model_81):
one channel per GPU, each on its own path through a server, so no Infinity Fabric link carries two."""

from collections import Counter

import pytest

from scalesim.collectives import busbw_bytes_per_s, plan_collective, plan_time_s
from scalesim.collectives.mesh import mesh_paths
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30
AMD_BOARDS = ("mi300x-8", "mi325x-8", "mi355x-8")


def cluster(design: str, nics: int, nodes: int = 2):
    return build_cluster(load_node_design(design), nodes=nodes, fabric=Fabric("roce-400g", nics))


def busbw(t, algo: str = "ring", size: float = GiB) -> float:
    n = len(t.gpus)
    plan = plan_collective("all_reduce", t, tuple(range(n)), size, algo=algo)
    return busbw_bytes_per_s("all_reduce", n, size, plan_time_s(plan, t.capacity_bytes_per_s))


def bound(t, nics: int, gpus: int = 8) -> float:
    """Ring busbw can exceed neither the server's NICs nor one xGMI link per channel (GPU)."""
    cap = t.capacity_bytes_per_s
    nic_rate = min(cap[link] for link in t.route(0, gpus))       # GPU 0's NIC path to the next server
    xgmi = min(cap[link] for link in t.route(0, 1))
    return min(nics * nic_rate, gpus * xgmi)


@pytest.mark.parametrize("n", [2, 4, 6, 7, 8, 9, 10, 11, 12])
def test_paths_use_every_link_once_and_start_and_end_on_every_gpu_once(n):
    paths = mesh_paths(n)
    arcs = Counter((p[i], p[i + 1]) for p in paths for i in range(n - 1))
    assert all(sorted(p) == list(range(n)) for p in paths)
    assert len(arcs) == n * (n - 1) and max(arcs.values()) == 1
    assert sorted(p[0] for p in paths) == sorted(p[-1] for p in paths) == list(range(n))


@pytest.mark.parametrize("design", AMD_BOARDS)
def test_two_servers_reach_the_nic_or_xgmi_bound_and_never_exceed_it(design):
    t = cluster(design, 8)
    limit = bound(t, 8)
    ring = busbw(t, "ring")
    assert 0.9 * limit <= ring <= limit * (1 + 1e-9)
    assert busbw(t, "auto") <= limit * (1 + 1e-9)


@pytest.mark.parametrize("design", AMD_BOARDS)
def test_no_infinity_fabric_link_carries_two_channels(design):
    t = cluster(design, 8)
    plan = plan_collective("all_reduce", t, tuple(range(16)), GiB, algo="ring")
    same_server = [f for f in plan.phases[0].flows
                   if t.graph.nodes[f.src]["server"] == t.graph.nodes[f.dst]["server"]]
    uses = Counter(link for f in same_server for link in f.links)
    assert len(same_server) == 2 * 8 * 7 and max(uses.values()) == 1


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_bytes_sent_equal_bytes_received_per_server(nodes):
    t = cluster("mi300x-8", 8, nodes)
    plan = plan_collective("all_reduce", t, tuple(range(8 * nodes)), GiB, algo="ring")
    sent, received = Counter(), Counter()
    for f in plan.phases[0].flows:
        a, b = t.graph.nodes[f.src]["server"], t.graph.nodes[f.dst]["server"]
        if a != b:
            sent[a] += f.size_bytes
            received[b] += f.size_bytes
    assert set(sent) == set(range(nodes))
    assert all(sent[s] == pytest.approx(received[s]) for s in range(nodes))


def test_even_server_counts_stay_on_one_rail():
    t = cluster("mi300x-8", 8, 4)
    plan = plan_collective("all_reduce", t, tuple(range(32)), GiB, algo="ring")
    nodes = t.graph.nodes
    between = [f for f in plan.phases[0].flows if nodes[f.src]["server"] != nodes[f.dst]["server"]]
    assert between and all(nodes[f.src]["index"] == nodes[f.dst]["index"] for f in between)


@pytest.mark.parametrize("design", AMD_BOARDS)
def test_more_nics_never_slower(design):
    rates = [busbw(cluster(design, nics)) for nics in (1, 2, 4, 8)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(rates, rates[1:]))
    assert rates[-1] > 4 * rates[0]


@pytest.mark.parametrize("design", AMD_BOARDS)
def test_tree_chains_load_every_infinity_fabric_link_equally(design):
    """RCCL's trees on these boards follow its ring paths (rome_models.cc 'Fall back to tree from ringBase')."""
    t = cluster(design, 8)
    plan = plan_collective("all_reduce", t, tuple(range(16)), GiB, algo="tree")
    nodes = t.graph.nodes
    uses = Counter(link for f in plan.phases[0].flows if nodes[f.src]["server"] == nodes[f.dst]["server"]
                   for link in f.links)
    assert len(uses) == 2 * 8 * 7 and len(set(uses.values())) == 1
