"""The tuner's memo (collectives/estimate.py, select.py): the same plans and the same floats as
planning from scratch, with the link sharing of a call's flows worked out once for all its sizes."""

import pytest

from scalesim.collectives import estimate, plan_collective, plan_time_s
from scalesim.collectives.protocol import PROTOCOLS
from scalesim.topology import Fabric, build_cluster, load_node_design

SIZES = (1e5, 3e6, 25 * 2**20, 2**30)


@pytest.fixture(scope="module")
def two_servers():
    return build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8, "rail-optimized"))


@pytest.mark.parametrize("ranks", [tuple(range(16)), (0, 8), (0, 1, 8, 9), tuple(range(8))])
def test_memoised_tuner_chooses_and_times_as_from_scratch(two_servers, ranks):
    memo = {}
    for size in SIZES:
        fresh = plan_collective("all_reduce", two_servers, ranks, size)
        kept = plan_collective("all_reduce", two_servers, ranks, size, memo=memo)
        assert kept == fresh
        for algo in ("ring", "tree"):
            for protocol in PROTOCOLS:
                plan = plan_collective("all_reduce", two_servers, ranks, size, algo, protocol)
                assert (plan_time_s(plan, two_servers.capacity_bytes_per_s, memo)
                        == plan_time_s(plan, two_servers.capacity_bytes_per_s))


def test_link_sharing_of_a_call_is_worked_out_once_for_every_size(two_servers, monkeypatch):
    """Max-min rates depend on which links flows share, not on their bytes: a bucket of another size, or
    another protocol (more bytes on the wire, the same links), reuses them."""
    calls = []
    original = estimate.max_min_rates
    monkeypatch.setattr(estimate, "max_min_rates", lambda *a, **k: calls.append(1) or original(*a, **k))
    memo = {}
    ranks = tuple(range(16))
    plans = [plan_collective("all_reduce", two_servers, ranks, size, "ring", protocol)
             for size in SIZES for protocol in PROTOCOLS]
    plan_time_s(plans[0], two_servers.capacity_bytes_per_s, memo)
    first = len(calls)
    assert first > 0
    for plan in plans[1:]:
        plan_time_s(plan, two_servers.capacity_bytes_per_s, memo)
    assert len(calls) == first
