"""SMs NCCL's kernels hold while a call runs: the channel counts NCCL logs on real machines."""

from scalesim.collectives import plan_collective
from scalesim.collectives.kernels import nccl_blocks, sm_share
from scalesim.topology import Fabric, build_cluster, load_node_design

GiB = 2**30


def node(name, nodes=1, fabric=None):
    return build_cluster(load_node_design(name), nodes=nodes, fabric=fabric)


def blocks(topology, op, ranks, size=GiB, algo="auto"):
    return nccl_blocks(plan_collective(op, topology, tuple(ranks), size, algo), topology)


def test_nvswitch_rings_run_24_channels_and_nvls_16():
    # DGX A100 logs "Channel 23/24"; 8x H100 "Trees [0] .. [23]" and NVLS_NCHANNELS 16.
    assert blocks(node("dgx-a100"), "all_reduce", range(8), algo="ring") == 24
    assert blocks(node("dgx-h100"), "all_gather", range(8)) == 24
    assert blocks(node("dgx-h100"), "all_reduce", range(8), algo="nvls") == 16


def test_host_staged_pcie_runs_two_channels_and_peer_to_peer_more():
    assert blocks(node("rtx4090-pcie-8"), "all_reduce", range(8)) == 2
    assert blocks(node("h100-pcie-8"), "all_reduce", range(8)) > 2


def test_across_servers_two_channels_per_nic_and_two_per_send():
    fabric = Fabric(link="ib-ndr", nics_per_node=8)
    two = node("dgx-h100", 2, fabric)
    assert blocks(two, "all_reduce", range(16), algo="ring") == 16      # "DGX with 8 NICs ... 16 SMs"
    assert blocks(two, "send", (0, 8)) == 2


def test_a_call_holds_a_minority_of_the_sms_and_one_gpu_holds_none():
    h100 = node("dgx-h100")
    plan = plan_collective("all_reduce", h100, tuple(range(8)), GiB, "ring")
    assert 0 < sm_share(plan, h100, h100.gpu_spec.sms) < 0.25
    assert sm_share(plan, h100, 0) == 0.0                               # SM count unknown: no contention
    assert nccl_blocks(plan_collective("all_reduce", h100, (0,), GiB), h100) == 0


def _time(plan, topology):
    from scalesim.collectives.estimate import plan_time_s
    return plan_time_s(plan, topology.capacity_bytes_per_s)


def test_capping_ctas_below_the_default_slows_a_nic_bound_call_to_its_ctas_share():
    # NCCL's model: two CTAs per NIC fill it (search.cc ncclTopoDupChannels); 8 CTAs on 8 NICs carry
    # half a NIC each, so a large reduce-scatter across servers takes about twice as long.
    from scalesim.collectives.kernels import cta_limited
    two = node("dgx-h100", 2, Fabric(link="ib-ndr", nics_per_node=8))
    plan = plan_collective("reduce_scatter", two, tuple(range(16)), 4 * GiB, "ring")
    capped = cta_limited(plan, two, 8)
    ratio = _time(capped, two) / _time(plan, two)
    assert 1.6 < ratio <= 2.05
    assert cta_limited(plan, two, 16) is plan and cta_limited(plan, two, None) is plan   # at the default: as is
    assert sm_share(plan, two, 132, 8) == 8 / 132 < sm_share(plan, two, 132)


def test_one_cta_inside_a_server_gets_one_default_channels_share_of_nvlink():
    from scalesim.collectives.kernels import cta_limited
    h100 = node("dgx-h100")
    plan = plan_collective("all_gather", h100, (0, 1), GiB, "ring")
    one = cta_limited(plan, h100, 1)
    assert _time(one, h100) > 10 * _time(plan, h100)       # 1 of 24 channels
