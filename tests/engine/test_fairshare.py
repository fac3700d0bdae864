"""Max-min fair sharing: the allocation every flow-level simulation rests on."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim.fairshare import max_min_rates


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
