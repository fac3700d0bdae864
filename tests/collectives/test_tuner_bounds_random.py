"""`auto`'s shortcut (select._fastest, estimate.plan_time_bounds_s) on drawn inputs (review15c): the bounds
hold the fluid model's computed time for any flows (links crossed twice, per-flow caps, links of very
different speeds, several phases), and the bounded choice is the one timing every candidate gives, on
drawn plans and on drawn clusters, groups, operations and sizes (with link speeds changed after the
plans were built, as a cluster with slower links or another tenant's share would present them)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scalesim.collectives import plan_collective, plan_time_s
from scalesim.collectives.estimate import plan_time_bounds_s
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.collectives.select import AUTO_EXCLUDED, _fastest, algorithms_for, protocols_for
from scalesim.errors import InputError
from scalesim.topology import Fabric, build_cluster, load_node_design

INF = float("inf")

capacities = st.lists(st.sampled_from([1e9, 2.5e9, 3e9, 12.5e9, 25e9, 50e9, 1e11, 4.5e11, 7.3e10]),
                      min_size=1, max_size=12)


@st.composite
def plans(draw, capacity_count: int):
    phases = []
    for _ in range(draw(st.integers(1, 3))):
        flows = tuple(
            Flow("a", "b", tuple(draw(st.lists(st.integers(0, capacity_count - 1), max_size=4))),
                 draw(st.sampled_from([0.0, 4.0, 4096.0, 1e6, 3.3e7, 1e9])),
                 draw(st.sampled_from([INF, INF, 1e9, 2e10])))
            for _ in range(draw(st.integers(0, 8))))
        phases.append(Phase(draw(st.sampled_from([0.0, 1e-6, 4.2e-6, 2.5e-5, 1e-4])), flows))
    return CollectivePlan("all_reduce", "ring", (0, 1), 1.0, tuple(phases),
                          tuner_unseen_latency_s=draw(st.sampled_from([0.0, 0.0, 3e-6, 2e-5])))


@given(st.data(), capacities)
@settings(max_examples=300, deadline=None)
def test_bounds_hold_the_computed_time_of_any_flows(data, capacity):
    plan = data.draw(plans(len(capacity)))
    low, high = plan_time_bounds_s(plan, capacity)
    for memo in (None, {}):
        timed = plan_time_s(plan, capacity, memo)
        assert low <= timed <= high


def _full_choice(candidates, capacity):
    """The choice before the shortcut: every candidate timed, ties to the first."""
    return min((plan_time_s(p, capacity) - p.tuner_unseen_latency_s, i) for i, p in enumerate(candidates))[1]


@given(st.data(), capacities)
@settings(max_examples=300, deadline=None)
def test_bounded_choice_is_the_full_choice_among_any_plans(data, capacity):
    candidates = data.draw(st.lists(plans(len(capacity)), min_size=2, max_size=6))
    chosen = _fastest(candidates, capacity, {})
    assert chosen is candidates[_full_choice(candidates, capacity)]


DESIGNS = ("dgx-h100", "dgx-a100", "hgx-b200", "rtx4090-pcie-8", "h100-pcie-8", "l40s-8", "a100-pcie-8",
           "mi300x-8", "mi355x-8", "gb200-nvl72", "grand-teton-h100")
OPS = ("all_reduce", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


@pytest.fixture(scope="module")
def built():
    return {}


def _cluster(built, design, nodes, link, kind, oversubscription, nics):
    key = (design, nodes, link, kind, oversubscription, nics)
    if key not in built:
        node = load_node_design(design)
        fabric = None if nodes == 1 else Fabric(link, min(nics, node.gpus), kind, oversubscription)
        built[key] = build_cluster(node, nodes=nodes, fabric=fabric)
    return built[key]


@given(design=st.sampled_from(DESIGNS), nodes=st.integers(1, 5),
       link=st.sampled_from(["ib-hdr", "ib-ndr", "roce-400g", "eth-100g", "efa-400g"]),
       kind=st.sampled_from(["fat-tree", "rail-optimized", "single-switch"]),
       oversubscription=st.sampled_from([1.0, 2.0, 3.5]), nics=st.sampled_from([1, 2, 4, 8]),
       op=st.sampled_from(OPS), data=st.data())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
def test_bounded_choice_is_the_full_choice_on_drawn_clusters(built, design, nodes, link, kind, oversubscription,
                                                             nics, op, data):
    try:
        topology = _cluster(built, design, nodes, link, kind, oversubscription, nics)
    except InputError:
        assume(False)
    count = len(topology.gpus)
    ranks = tuple(data.draw(st.one_of(
        st.lists(st.integers(0, count - 1), min_size=2, max_size=min(count, 40), unique=True),
        st.integers(1, max(1, count // 2)).map(lambda step: tuple(range(0, count, step))),
        st.just(tuple(range(count))))))
    assume(len(ranks) > 1)
    size = data.draw(st.sampled_from([1.0, 4.0, 96.0, 4096.0, 65536.0, 2.0 ** 20, 3e7, 2.0 ** 30]))
    candidates = [plan_collective(op, topology, ranks, size, a, p)
                  for a in (algorithms_for(op, topology, ranks) if op == "all_reduce" else ["ring"])
                  if a not in AUTO_EXCLUDED for p in protocols_for(a, topology, ranks)]
    capacity = topology.capacity_bytes_per_s
    full = candidates[_full_choice(candidates, capacity)]
    for memo in (None, {}):
        assert plan_collective(op, topology, ranks, size, memo=memo) == full
    # link speeds other than the ones the plans were built on: some links drawn 2-40x slower
    slow = data.draw(st.lists(st.integers(0, len(capacity) - 1), max_size=12))
    factor = data.draw(st.sampled_from([2.0, 7.0, 40.0]))
    changed = list(capacity)
    for link in slow:
        changed[link] = capacity[link] / factor
    assert _fastest(candidates, changed, {}) is candidates[_full_choice(candidates, changed)]
