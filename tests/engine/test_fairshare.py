"""Max-min fair sharing: the allocation every flow-level simulation rests on."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim.fairshare import ARRAYS_FROM, _with_private_links, filling_arrays, filling_heap, max_min_rates


def test_two_flows_on_one_link_each_get_half():
    assert max_min_rates([(0,), (0,)], [100.0]) == [50.0, 50.0]


def test_a_flow_limited_elsewhere_leaves_the_rest_to_others():
    # flow 0 crosses a 10-wide link; flow 1 only the shared 100-wide one.
    assert max_min_rates([(0, 1), (1,)], [10.0, 100.0]) == [10.0, 90.0]


def test_a_flow_without_links_is_unconstrained():
    assert max_min_rates([()], []) == [float("inf")]


networks = st.integers(1, 6).flatmap(lambda n_links: st.tuples(
    st.lists(st.floats(1.0, 1e3), min_size=n_links, max_size=n_links),
    st.lists(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True),
             min_size=1, max_size=8),
))


@given(networks)
@settings(max_examples=200, deadline=None)
def test_allocation_is_feasible_and_max_min_fair(net):
    capacity, flows = net
    rates = max_min_rates(flows, capacity)
    load = [0.0] * len(capacity)
    for links, rate in zip(flows, rates):
        for link in links:
            load[link] += rate
    for link, cap in enumerate(capacity):
        assert load[link] <= cap * (1 + 1e-9)
    # Max-min fairness: every flow has a bottleneck, a saturated link on which
    # no other flow gets more than it does.
    for i, links in enumerate(flows):
        assert any(
            load[l] >= capacity[l] * (1 - 1e-9)
            and all(rates[j] <= rates[i] * (1 + 1e-9) for j, other in enumerate(flows) if l in other)
            for l in links
        )


@given(networks, st.integers(0, 5), st.floats(1.0, 10.0))
@settings(max_examples=100, deadline=None)
def test_more_capacity_never_lowers_the_slowest_flow(net, which, factor):
    capacity, flows = net
    link = which % len(capacity)
    before = min(max_min_rates(flows, capacity))
    bigger = list(capacity)
    bigger[link] *= factor
    assert min(max_min_rates(flows, bigger)) >= before * (1 - 1e-9)


@given(networks, st.randoms(use_true_random=False), st.lists(st.sampled_from([float("inf"), 7.0, 50.0]), min_size=8,
                                                             max_size=8))
@settings(max_examples=200, deadline=None)
def test_rates_do_not_depend_on_the_order_of_flows_to_the_bit(net, rng, caps):
    # The engine reuses the rates of a set of paths whatever order its calls started in,
    # and gives flows on the same path with the same cap one rate (engine/network.py).
    capacity, flows = net
    caps = caps[:len(flows)]
    flows = flows + flows[:2]                  # some paths twice
    caps = caps + caps[:2]
    rates = max_min_rates(flows, capacity, caps)
    order = list(range(len(flows)))
    rng.shuffle(order)
    shuffled = max_min_rates([flows[i] for i in order], capacity, [caps[i] for i in order])
    assert [shuffled[order.index(i)] for i in range(len(flows))] == rates
    same = {}
    for links, cap, rate in zip(flows, caps, rates):
        assert same.setdefault((tuple(links), cap), rate) == rate


# Ties on purpose: a few capacities and caps, links crossed twice, flows with no link.
tied = st.integers(1, 8).flatmap(lambda n_links: st.tuples(
    st.lists(st.sampled_from([10.0, 20.0, 30.0, 70.0]), min_size=n_links, max_size=n_links),
    st.lists(st.lists(st.integers(0, n_links - 1), max_size=4).map(tuple), min_size=1, max_size=30),
    st.none() | st.lists(st.sampled_from([float("inf"), 5.0, 7.5]), min_size=30, max_size=30),
))


@given(tied)
@settings(max_examples=150, deadline=None)
def test_array_and_heap_filling_give_the_same_rates_to_the_bit(net):
    # Large components (an expert all-to-all: thousands of flows) are filled with numpy; the
    # engine's results must not depend on which of the two a component's size picks.
    capacity, flows, caps = net
    links, private = _with_private_links(flows, caps[:len(flows)] if caps else None)
    assert filling_arrays(links, capacity, private) == filling_heap(links, capacity, private)


def test_an_all_to_all_gets_the_same_rates_from_either_filling():
    # 64 ranks, each with an up- and a down-link to a switch; ranks 0-7 have half-width links.
    capacity = [50.0 if r % 64 < 8 else 100.0 for r in range(128)]
    flows = [(a, 64 + b) for a in range(64) for b in range(64) if a != b]
    assert 2 * len(flows) >= ARRAYS_FROM               # max_min_rates fills this one with arrays
    rates = max_min_rates(flows, capacity)
    assert rates == filling_heap(flows, capacity, {})
    assert min(rates) == pytest.approx(50.0 / 63) and max(rates) > 100.0 / 63   # the rest take what 0-7 leave
