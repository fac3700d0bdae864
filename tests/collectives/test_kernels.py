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
    # NCCL runs two CTAs per NIC (connectRings, connect.cc:443-452 @v2.28.3-1); cut to 8, each of the 8
    # kept channels is alone on its NIC and is modelled at half a NIC, so a large reduce-scatter
    # across servers takes about twice as long.
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


def _ring(op="reduce_scatter", servers=2, size=4 * GiB):
    cluster = node("dgx-h100", servers, Fabric(link="ib-ndr", nics_per_node=8))
    return cluster, plan_collective(op, cluster, tuple(range(8 * servers)), size, "ring")


def test_more_ctas_are_never_slower():
    from scalesim.collectives.kernels import cta_limited
    h100 = node("dgx-h100")
    for topology, plan in (_ring(), _ring("all_gather", 4), (h100, plan_collective("all_gather", h100, tuple(range(8)),
                                                                                     GiB, "ring"))):
        times = [_time(cta_limited(plan, topology, k), topology) for k in range(1, 33)]
        assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(times, times[1:]))
        assert times[0] > times[-1] == _time(plan, topology)    # uncut at and above the default


def test_a_cut_rings_boundary_bytes_move_at_what_its_channels_carry():
    # Below the search count each kept CTA is its own ring through its own NIC pair (connect.cc:487-491):
    # the bytes crossing a server boundary move at k channels x one CTA's rate, never more.
    from scalesim.collectives.kernels import cta_bytes_per_s, cta_limited
    topology, plan = _ring()
    per_cta = cta_bytes_per_s(plan, topology)
    crossing = sum(f.size_bytes for p in plan.phases for f in p.flows
                   if f.src.startswith("n0/") and f.dst.startswith("n1/"))
    assert crossing > 0
    for k in (1, 2, 4, 8):
        capped = cta_limited(plan, topology, k)
        rate = crossing / (_time(capped, topology) - sum(p.latency_s for p in capped.phases))
        assert rate <= k * per_cta * (1 + 1e-9)
        assert rate > 0.95 * k * per_cta
