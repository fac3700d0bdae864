"""NCCL runs NVLS (and so NVLSTree) only with more than two GPUs of the communicator on a node:
ncclNvlsInit returns without it at gpuCount <= 2 (src/transport/nvls.cc, v2.18.5-1 to v2.28.3-1)."""

import pytest

from scalesim.collectives import plan_collective
from scalesim.collectives.select import algorithms_for
from scalesim.errors import InputError
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30


def servers(node: str, count: int):
    return build_cluster(load_node_design(node), nodes=count, fabric=Fabric("ib-ndr", 8))


@pytest.mark.parametrize("node", ["dgx-h100", "hgx-b200"])
def test_two_gpus_a_server_across_servers_run_no_nvls_tree(node):
    # a data-parallel group of a TP-4 plan on two 8-GPU servers: two of its GPUs on each
    t = servers(node, 2)
    ranks = (0, 1, 8, 9)
    assert "nvls_tree" not in algorithms_for("all_reduce", t, ranks)
    assert plan_collective("all_reduce", t, ranks, GiB).algo != "nvls_tree"
    three = (0, 1, 2, 8, 9, 10)
    assert "nvls_tree" in algorithms_for("all_reduce", t, three)


@pytest.mark.parametrize("node", ["dgx-h100", "gb200-nvl72"])
def test_two_gpus_on_one_switch_run_no_nvls_and_asking_for_it_says_what_is_allowed(node):
    t = servers(node, 1)
    assert "nvls" not in algorithms_for("all_reduce", t, (0, 1))
    assert "nvls" in algorithms_for("all_reduce", t, (0, 1, 2))
    with pytest.raises(InputError, match="allowed here"):
        plan_collective("all_reduce", t, (0, 1), GiB, "nvls")
