"""`links_crossed`: the links a collective's plan crosses, found for rings without making the plan."""

import pytest

from scalesim.collectives import links_crossed, plan_collective
from scalesim.topology import Fabric, build_cluster, load_node_design


def _links(plan) -> set:
    return {link for phase in plan.phases for f in phase.flows for link in f.links}


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
@pytest.mark.parametrize("protocol", ["ll", "ll128", "simple"])
def test_a_rings_links_are_those_its_plan_crosses(op, protocol):
    t = build_cluster(load_node_design("dgx-h100"), nodes=4, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    for ranks in [(0, 8, 16, 24), (3, 11, 19, 27), tuple(range(8)), (1, 2, 9, 10, 17, 18), (5, 13), (7,)]:
        for size in (0.0, 1.0, 2**26):
            plan = plan_collective(op, t, ranks, size, "ring", protocol, {})
            assert links_crossed(op, t, ranks, size, "ring", protocol, {}) == _links(plan)
            if len(ranks) > 1 and size > 0:
                assert _links(plan)            # the check is not vacuous


def test_other_algorithms_read_the_plan():
    t = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    memo: dict = {}
    for op, algo, ranks in [("all_reduce", "tree", (0, 8)), ("all_to_all", "direct", (0, 1, 8, 9)), ("send", "direct", (2, 10))]:
        plan = plan_collective(op, t, ranks, 2**20, algo, "simple", memo)
        assert links_crossed(op, t, ranks, 2**20, algo, "simple", memo) == _links(plan) != set()
