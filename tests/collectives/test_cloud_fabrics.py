"""The cloud GPU fabrics of the catalog (AWS EFA on p5en/p6-b200, GCP GPUDirect-TCPX and -TCPXO): physics, not figures."""

from collections import Counter
from dataclasses import replace

import pytest

from scalesim.collectives import plan_collective, plan_time_s
from scalesim.hardware import get_link
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.topology import Fabric, build_cluster, load_node_design

MiB, GiB = 2**20, 2**30
CLOUD_LINKS = ("efa-p5en-p6", "tcpx-200g", "tcpxo-200g")


def cluster(link: str, nics: int = 8, nodes: int = 2, catalog=None, node: str = "dgx-h100"):
    return build_cluster(load_node_design(node), nodes=nodes, fabric=Fabric(link, nics), catalog=catalog)


def call_s(topology, op: str, size: float, algo: str = "auto") -> float:
    ranks = tuple(range(len(topology.gpus)))
    return plan_time_s(plan_collective(op, topology, ranks, size, algo), topology.capacity_bytes_per_s)


def test_aws_ofi_nccl_reports_35_us_on_p5en_and_p6():
    # aws-ofi-nccl src/platform-aws.cpp, platform 'p5en/p6-b200': .latency = 35.0 (75.0 on p5)
    p5en, p5 = get_link("efa-p5en-p6"), get_link("efa-400g")
    assert p5en.net_plugin_latency_s == pytest.approx(35e-6)
    assert p5en.net_plugin_latency_s < p5.net_plugin_latency_s
    assert p5en.bw_bytes_per_s == p5.bw_bytes_per_s == pytest.approx(50e9)   # 3200 Gb/s over 8 GPU devices


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_the_lower_reported_latency_is_never_slower(op):
    for size in (MiB, 64 * MiB, 4 * GiB):
        assert call_s(cluster("efa-p5en-p6", nodes=4), op, size) <= call_s(cluster("efa-400g", nodes=4), op, size)


@pytest.mark.parametrize("link", CLOUD_LINKS)
@pytest.mark.parametrize("op", ["all_reduce", "all_gather"])
def test_more_nics_are_never_slower(link, op):
    times = [call_s(cluster(link, nics), op, 1 * GiB) for nics in (2, 4, 8)]
    assert times == sorted(times, reverse=True) and times[-1] < times[0]


@pytest.mark.parametrize("link", CLOUD_LINKS)
def test_more_nic_bandwidth_is_never_slower(link):
    base = get_link(link)
    catalog = builtin_catalog()
    for scale in (2.0, 4.0):
        catalog = catalog.with_spec(replace(base, name=f"{link}-x{scale:g}", bw_bytes_per_s=base.bw_bytes_per_s * scale), "test")
    sizes = (16 * MiB, 1 * GiB)
    for op in ("all_reduce", "all_gather"):
        for size in sizes:
            times = [call_s(cluster(name, catalog=catalog), op, size)
                     for name in (link, f"{link}-x2", f"{link}-x4")]
            assert times == sorted(times, reverse=True)


def test_tcpxo_offload_is_not_slower_than_tcpx_at_the_same_wire_rate():
    # both 200 Gb/s a NIC; TCPX runs the host's TCP stack (socket-transport efficiency), TCPXO offloads it
    assert get_link("tcpx-200g").bw_bytes_per_s == get_link("tcpxo-200g").bw_bytes_per_s
    assert call_s(cluster("tcpxo-200g", 4), "all_gather", GiB) < call_s(cluster("tcpx-200g", 4), "all_gather", GiB)


@pytest.mark.parametrize("link", CLOUD_LINKS)
@pytest.mark.parametrize("op, algo", [("all_reduce", "ring"), ("all_reduce", "nvls_tree"), ("all_gather", "ring"),
                                      ("reduce_scatter", "ring")])
def test_every_server_receives_across_the_network_what_it_sends(link, op, algo):
    t = cluster(link, nics=4 if link == "tcpx-200g" else 8, nodes=4)
    plan = plan_collective(op, t, tuple(range(len(t.gpus))), 256 * MiB, algo)
    sent, received = Counter(), Counter()
    for phase in plan.phases:
        for f in phase.flows:
            src, dst = t.graph.nodes[f.src]["server"], t.graph.nodes[f.dst]["server"]
            if src != dst:
                sent[src] += f.size_bytes
                received[dst] += f.size_bytes
    assert set(sent) == set(received) == set(range(4))
    for server in range(4):
        assert sent[server] == pytest.approx(received[server])
