"""Ring collectives expanded on real topologies, checked against nccl-tests' definitions."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim.collectives import bus_factor, busbw_bytes_per_s, plan_collective
from scalesim.engine import simulate
from scalesim.hardware import get_link
from scalesim.program import CollectiveTask, Program
from scalesim.topology import Topology, build_cluster, load_node_design

GiB = 2**30


def time_of(topology, plan) -> float:
    tasks = {r: (CollectiveTask("c", "k", plan),) for r in plan.ranks}
    return simulate(Program(tasks, topology.capacity_bytes_per_s)).end_s


def uniform_ring(n: int, link_name: str = "nvlink4", bw_scale: float = 1.0) -> Topology:
    """n GPUs wired in a ring by one link type: the textbook setting."""
    link = get_link(link_name)
    if bw_scale != 1.0:
        from dataclasses import replace
        link = replace(link, bw_bytes_per_s=link.bw_bytes_per_s * bw_scale)
    g = nx.Graph(name="ring")
    for i in range(n):
        g.add_node(f"gpu{i}", kind="gpu", socket=0, index=i, p2p=True, server=0)
    for i in range(n):
        g.add_edge(f"gpu{i}", f"gpu{(i + 1) % n}", link=link, duplex=True)
    return Topology(g, "ring")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_large_all_reduce_on_a_uniform_ring_reaches_link_bandwidth_as_busbw(n):
    t = uniform_ring(n)
    link = get_link("nvlink4")
    plan = plan_collective("all_reduce", t, tuple(range(n)), 4 * GiB, algo="ring")
    busbw = busbw_bytes_per_s("all_reduce", n, 4 * GiB, time_of(t, plan))
    assert busbw == pytest.approx(link.bw_bytes_per_s * link.efficiency, rel=0.01)


def test_nvswitch_all_reduce_reaches_the_gpu_port_bandwidth():
    t = build_cluster(load_node_design("dgx-a100"))
    plan = plan_collective("all_reduce", t, tuple(range(8)), 4 * GiB, algo="ring")
    port = get_link("nvlink3")
    busbw = busbw_bytes_per_s("all_reduce", 8, 4 * GiB, time_of(t, plan))
    assert busbw == pytest.approx(port.bw_bytes_per_s * port.efficiency, rel=0.01)


def test_host_staged_4090_ring_is_slower_than_the_pcie_slot():
    t = build_cluster(load_node_design("rtx4090-pcie-8"))
    plan = plan_collective("all_reduce", t, tuple(range(8)), 1 * GiB)
    busbw = busbw_bytes_per_s("all_reduce", 8, 1 * GiB, time_of(t, plan))
    slot = get_link("pcie-gen4")
    assert busbw < slot.bw_bytes_per_s * slot.efficiency


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"])
def test_each_ring_edge_moves_what_the_algorithm_says(op):
    n, size = 4, 1000.0
    plan = plan_collective(op, uniform_ring(n), tuple(range(n)), size, algo="ring", protocol="simple")
    per_edge = {f.size_bytes for phase in plan.phases for f in phase.flows}
    edges = sum(len(p.flows) for p in plan.phases)
    assert len(per_edge) == 1
    # Total bytes on the wire = busbw factor x size x ranks (or edges for the chain ops).
    assert per_edge.pop() * edges == pytest.approx(bus_factor(op, n) * size * (n if op not in ("broadcast", "reduce") else n - 1))


def test_one_rank_moves_nothing():
    plan = plan_collective("all_reduce", uniform_ring(2), (0,), 1e9)
    assert plan.phases == ()


@given(st.integers(2, 8), st.floats(1e3, 1e10), st.floats(1.0, 8.0))
@settings(max_examples=40, deadline=None)
def test_more_bandwidth_is_never_slower(n, size, factor):
    slow, fast = uniform_ring(n), uniform_ring(n, bw_scale=factor)
    t_slow = time_of(slow, plan_collective("all_reduce", slow, tuple(range(n)), size))
    t_fast = time_of(fast, plan_collective("all_reduce", fast, tuple(range(n)), size))
    # ("auto" may choose differently on each; the faster network is still never slower.)
    assert t_fast <= t_slow * (1 + 1e-12)


@given(st.floats(1e3, 1e9))
@settings(max_examples=30, deadline=None)
def test_bigger_messages_never_reach_lower_bus_bandwidth(size):
    t = uniform_ring(8)
    small = busbw_bytes_per_s("all_reduce", 8, size, time_of(t, plan_collective("all_reduce", t, tuple(range(8)), size)))
    big = busbw_bytes_per_s("all_reduce", 8, 2 * size, time_of(t, plan_collective("all_reduce", t, tuple(range(8)), 2 * size)))
    assert big >= small * (1 - 1e-9)


def test_a_ring_planned_with_the_run_memo_is_the_ring_planned_afresh():
    """ring_plan keeps a ring's edges, routes and latency in the run's memo for every later size of
    call on the same ranks; each plan must still be the one planned with nothing kept."""
    from scalesim.collectives.ring import ring_plan
    from scalesim.topology import Fabric

    t = build_cluster(load_node_design("dgx-h100"), nodes=3, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    memo: dict = {}
    groups = [tuple(range(0, 24, 8)), tuple(range(1, 24, 8)), tuple(range(8)), (3, 11, 12, 20)]
    for ranks in groups:
        for op in ("all_reduce", "reduce_scatter", "broadcast"):
            for protocol in ("ll", "simple"):
                for size in (1e3, 3 * GiB, 5e6):
                    kept = ring_plan(op, t, ranks, size, protocol, memo)
                    assert kept == ring_plan(op, t, ranks, size, protocol)
                    assert kept.phases[0].flows and kept.bytes_sent > 0


@pytest.mark.parametrize("op,algo", [("all_reduce", "ring"), ("all_reduce", "tree"), ("all_reduce", "nvls_tree"),
                                     ("all_gather", "ring"), ("all_to_all", "direct"), ("send", "direct")])
def test_the_links_a_plan_crosses_do_not_depend_on_its_size(op, algo):
    """The step builder finds once which symmetric copies of a group share links with its plan and
    reuses that for every size of call with the same algorithm and protocol: it relies on this."""
    from scalesim.topology import Fabric

    t = build_cluster(load_node_design("dgx-h100"), nodes=4, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    ranks = (0, 8) if op == "send" else tuple(range(32)) if algo == "nvls_tree" else tuple(range(0, 32, 3))

    def links(size):
        plan = plan_collective(op, t, ranks, size, algo=algo, protocol="simple")
        return [[f.links for f in phase.flows] for phase in plan.phases]

    assert links(1e3) == links(7e6) == links(3 * GiB)
