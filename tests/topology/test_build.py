"""Node designs built into graphs: counts, connectivity and the paths copies take."""

import networkx as nx
import pytest

from scalesim.errors import InputError
from scalesim.topology import build_cluster, build_node_graph, builtin_topology_names, load_node_design

REQUIRED = {"rtx4090-pcie-8", "rtx4090-pcie-4", "a100-pcie-8", "dgx-a100", "dgx-h100", "h100-pcie-8", "hgx-h200"}


def kinds(topology, path):
    return [topology.graph.nodes[n]["kind"] for n in path]


def test_every_design_named_in_the_contract_ships():
    assert REQUIRED <= set(builtin_topology_names())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_designs_build_into_connected_graphs_with_their_gpu_count(name):
    design = load_node_design(name)
    g = build_node_graph(design)
    assert nx.is_connected(g)
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu") == design.gpus
    assert all(d["link"].bw_bytes_per_s > 0 for _, _, d in g.edges(data=True))


def test_rtx4090_without_p2p_stages_copies_through_host_memory():
    t = build_cluster(load_node_design("rtx4090-pcie-8"))
    # GPUs 0 and 1 share a PCIe switch, yet the copy goes up to the CPU and its memory.
    assert kinds(t, t.path(0, 1)) == ["gpu", "pcie_switch", "cpu", "host_memory", "cpu", "pcie_switch", "gpu"]
    # Across sockets the copy also crosses the socket link.
    assert "cpu1" in t.path(0, 7) and "cpu0" in t.path(0, 7)


def test_p2p_copies_turn_at_the_shared_pcie_switch():
    t = build_cluster(load_node_design("a100-pcie-8"))
    assert kinds(t, t.path(0, 1)) == ["gpu", "pcie_switch", "gpu"]


def test_turning_p2p_on_for_the_4090_avoids_host_memory():
    design = load_node_design("rtx4090-pcie-8").model_copy(update={"p2p": True})
    t = build_cluster(design)
    assert "host_memory" not in kinds(t, t.path(0, 1))


def _root_port_pair(cpu: str, switches: int = 0):
    return load_node_design({"name": "pair", "gpu": "h100-pcie", "gpus": 2, "host": {"sockets": 1, "cpu": cpu},
                             "pcie": {"switches": switches}})


def test_nccl_uses_p2p_through_the_cpu_only_on_amd_hosts():
    # NVIDIA/nccl src/graph/paths.cc ncclTopoCheckP2p: P2P up to PATH_SYS by default, PATH_PXB
    # (a common PCIe switch) on Intel and ARM CPUs; elsewhere NCCL's SHM transport stages in host memory.
    intel, amd = build_cluster(_root_port_pair("intel")), build_cluster(_root_port_pair("amd"))
    assert kinds(intel, intel.path(0, 1)) == ["gpu", "cpu", "host_memory", "cpu", "gpu"]
    assert kinds(amd, amd.path(0, 1)) == ["gpu", "cpu", "gpu"]
    below_switch = build_cluster(_root_port_pair("intel", switches=1))
    assert kinds(below_switch, below_switch.path(0, 1)) == ["gpu", "pcie_switch", "gpu"]


def test_the_cpu_vendor_follows_the_socket_link_unless_given():
    from scalesim.topology.design import host_cpu
    assert host_cpu(load_node_design("a100-pcie-8").host) == "amd"      # infinity-fabric
    assert host_cpu(load_node_design("dgx-h100").host) == "intel"       # upi
    assert host_cpu(_root_port_pair("arm").host) == "arm"


def test_sxm_gpus_talk_over_the_nvswitch():
    t = build_cluster(load_node_design("dgx-h100"))
    assert kinds(t, t.path(2, 5)) == ["gpu", "nvswitch", "gpu"]


def test_each_direction_of_a_duplex_link_is_its_own_resource_and_memory_is_shared():
    t = build_cluster(load_node_design("rtx4090-pcie-8"))
    there, back = t.route(0, 1), t.route(1, 0)
    assert there[0] != back[-1]               # gpu0 -> switch differs from switch -> gpu0
    path = t.path(0, 1)
    hops = list(zip(path, path[1:]))
    memory = [r for (u, v), r in zip(hops, there) if "host_memory" in kinds(t, (u, v))]
    assert len(memory) == 2 and memory[0] == memory[1]   # write and read share the DRAM


def test_inline_design_and_its_errors():
    design = load_node_design({"gpu": "h100-sxm", "gpus": 4, "nvlink": {"fabric": "nvswitch"}}, key="cluster.node")
    assert len(build_cluster(design).gpus) == 4
    with pytest.raises(InputError, match="cluster.node.gpus"):
        load_node_design({"gpu": "h100-sxm", "gpus": 0}, key="cluster.node")
    with pytest.raises(InputError, match="Did you mean 'switches'"):
        load_node_design({"gpu": "h100-sxm", "gpus": 8, "pcie": {"switchs": 4}}, key="cluster.node")


def test_unknown_topology_name_suggests_the_closest():
    with pytest.raises(InputError, match="dgx-h100"):
        load_node_design("dgx-h10")


def test_nvlink_on_a_gpu_without_it_is_refused():
    design = load_node_design({"gpu": "rtx4090", "gpus": 2, "nvlink": {"fabric": "bridge"}})
    with pytest.raises(InputError, match="no NVLink"):
        build_node_graph(design)


@pytest.mark.parametrize("name", ["dgx-h100", "rtx4090-pcie-8", "mi300x-8"])
def test_a_copied_node_is_the_node_built_afresh_under_its_prefix(name):
    """build_cluster copies one built node per server: the copy must be the graph building that
    server afresh would give, node and edge order included (resource ids follow edge order)."""
    from scalesim.topology.build import add_node_copy

    design = load_node_design(name)
    template = build_node_graph(design, nic_count=2, nic_link="ib-ndr")
    fresh, copied = nx.Graph(), nx.Graph()
    for k in (0, 1, 5):
        fresh.update(build_node_graph(design, prefix=f"n{k}/", server=k, nic_count=2, nic_link="ib-ndr"))
        nics = add_node_copy(copied, template, f"n{k}/", k)
        assert nics == [f"n{k}/nic0", f"n{k}/nic1"]
    assert list(copied.nodes(data=True)) == list(fresh.nodes(data=True))
    assert list(copied.edges(data=True)) == list(fresh.edges(data=True))
    assert copied.graph == fresh.graph
    assert {d["server"] for _, d in template.nodes(data=True)} == {0}     # the template is left as built


def test_a_node_gets_at_most_one_compute_nic_per_gpu():
    """More fabric NICs than GPUs is refused naming the key; one per GPU builds."""
    from scalesim.errors import InputError
    from scalesim.topology import Fabric
    design = load_node_design("dgx-h100")
    build_cluster(design, nodes=2, fabric=Fabric("ib-ndr", design.gpus))
    with pytest.raises(InputError) as refused:
        build_cluster(design, nodes=2, fabric=Fabric("ib-ndr", design.gpus + 1))
    assert refused.value.key == "cluster.fabric.nics_per_node"
