"""NVLSTree across servers runs NCCL's double binary tree (ncclGetDtree), not a ring."""

from collections import Counter

import pytest

from scalesim.collectives import plan_collective
from scalesim.collectives.tree import nccl_dtree_edges
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30


def busiest_nic_bytes(servers: int) -> tuple[float, int]:
    t = build_cluster(load_node_design("dgx-h100"), nodes=servers, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
    ranks = tuple(range(8 * servers))
    plan = plan_collective("all_reduce", t, ranks, 1 * GiB, algo="nvls_tree")
    out = Counter()
    for phase in plan.phases:
        for f in phase.flows:
            if t.graph.nodes[f.src]["server"] != t.graph.nodes[f.dst]["server"]:
                out[f.src] += f.size_bytes
    return max(out.values()), 8


@pytest.mark.parametrize("servers,per_shard", [(2, 1.0), (4, 2.0), (8, 2.0)])
def test_the_busiest_nic_sends_what_a_double_binary_tree_sends(servers, per_shard):
    # with two servers each tree is a pair (S/k each way in all); beyond, a server inside one
    # tree sends half the shard to its parent and to two children, plus half to its parent in
    # the other tree: 2 S/k, where a ring among the servers would send 2(M-1)/M S/k
    sent, k = busiest_nic_bytes(servers)
    assert sent == pytest.approx(per_shard * GiB / k)


@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 8, 13, 32])
def test_nccl_two_trees_span_every_rank_and_each_rank_is_inside_at_most_one(nranks):
    for tree in nccl_dtree_edges(nranks):
        children = [c for _, c in tree]
        assert len(tree) == nranks - 1 and len(set(children)) == nranks - 1
        assert max(Counter(p for p, _ in tree).values()) <= 2       # binary
    inner = [{p for p, _ in tree} for tree in nccl_dtree_edges(nranks)]
    if nranks % 2 == 0:
        assert not inner[0] & inner[1]
