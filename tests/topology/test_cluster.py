"""Clusters are expensive to build at thousands of nodes: the same inputs reuse one."""

from scalesim.topology import Fabric, cached_cluster, load_node_design


def test_the_same_cluster_is_built_once_and_a_different_one_is_not_confused_with_it():
    design = load_node_design("dgx-h100")
    fabric = Fabric("ib-ndr", 8, "rail-optimized")
    first = cached_cluster(design, nodes=2, fabric=fabric)
    assert cached_cluster(design, nodes=2, fabric=fabric) is first
    other = cached_cluster(design, nodes=3, fabric=fabric)
    assert other is not first and len(other.gpus) == 24
    assert cached_cluster(design, nodes=2, fabric=Fabric("ib-hdr", 8, "rail-optimized")) is not first
