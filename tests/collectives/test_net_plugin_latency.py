"""A net plugin's reported latency (aws-ofi-nccl on EFA) in NCCL's per-step network latency."""

from dataclasses import replace

import pytest

from scalesim.collectives import plan_collective, plan_time_s
from scalesim.collectives.protocol import net_step_latency_s, step_latency_s
from scalesim.errors import InputError
from scalesim.hardware import get_link
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.topology import Fabric, build_cluster, load_node_design

MiB = 2**20


def p5_cluster(nodes: int, plugin_us: float):
    """p5-like nodes (8x H100 on NVSwitch, 8 x 400G EFA devices), the plugin reporting `plugin_us`."""
    link = replace(get_link("efa-400g"), name="efa-test", net_plugin_latency_s=plugin_us * 1e-6)
    catalog = builtin_catalog().with_spec(link, "test")
    return build_cluster(load_node_design("dgx-h100"), nodes=nodes, fabric=Fabric("efa-test", 8), catalog=catalog)


def call_s(topology, op: str, size: float, algo: str = "auto") -> float:
    ranks = tuple(range(len(topology.gpus)))
    return plan_time_s(plan_collective(op, topology, ranks, size, algo), topology.capacity_bytes_per_s)


def test_aws_ofi_nccl_reports_75_us_on_p5():
    # aws-ofi-nccl src/platform-aws.cpp platform_data_map, '^p5(e?\\..*)': .latency = 75.0
    assert get_link("efa-400g").net_plugin_latency_s == pytest.approx(75e-6)
    assert get_link("ib-ndr").net_plugin_latency_s == 0          # NCCL's IB transport: props->latency = 0


def test_simple_pays_the_plugin_latency_twice_per_network_step():
    # NCCL src/graph/tuning.cc (2.18+): interLat += latencyInter, and again for Simple (the flush)
    for algo in ("ring", "tree"):
        assert net_step_latency_s(algo, "simple", 75e-6) - step_latency_s("net", algo, "simple") == pytest.approx(150e-6)
        assert net_step_latency_s(algo, "ll", 75e-6) - step_latency_s("net", algo, "ll") == pytest.approx(75e-6)


@pytest.mark.parametrize("op, algo", [("all_reduce", "ring"), ("all_reduce", "tree"), ("all_reduce", "nvls_tree"),
                                      ("reduce_scatter", "ring"), ("all_reduce", "auto")])
def test_more_plugin_latency_is_never_faster(op, algo):
    times = [call_s(p5_cluster(4, us), op, 64 * MiB, algo) for us in (0, 35, 75, 150)]
    assert times == sorted(times) and times[-1] > times[0]


def test_zero_plugin_latency_changes_nothing():
    without = build_cluster(load_node_design("dgx-h100"), nodes=4, fabric=Fabric("roce-400g", 8))
    zero = p5_cluster(4, 0)        # efa-400g's other figures are roce-400g's
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        assert call_s(zero, op, 32 * MiB) == call_s(without, op, 32 * MiB)


def test_plugin_latency_matters_less_for_bigger_messages():
    slow, fast = p5_cluster(8, 75), p5_cluster(8, 0)
    # up to 16 GiB: at 4 GiB over 64 ranks NVLSTree runs at NCCL's per-channel busbw cap (collectives/nvls.py),
    # so the latency-free ring wins there and the plugin still costs ~5%
    sizes = (MiB, 64 * MiB, 4096 * MiB, 16384 * MiB)
    ratios = [call_s(slow, "all_reduce", size) / call_s(fast, "all_reduce", size) for size in sizes]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < 1.05


def test_plugin_latency_is_not_paid_inside_one_node():
    assert call_s(p5_cluster(1, 75), "all_reduce", 64 * MiB) == call_s(p5_cluster(1, 0), "all_reduce", 64 * MiB)


def test_only_network_links_report_a_plugin_latency():
    catalog = builtin_catalog()
    with pytest.raises(InputError, match="net_plugin_latency"):
        catalog.resolve_link({"base": "nvlink4", "net_plugin_latency": "75 us"})
    assert catalog.resolve_link({"base": "roce-400g", "net_plugin_latency": "35 us"}).net_plugin_latency_s == pytest.approx(35e-6)
