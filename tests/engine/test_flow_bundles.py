"""The fluid network keeps the flows of one call that have the same size and cap as one bundle
while max-min sharing gives them one rate (an all-to-all's thousands of flows are a few bundles).
Bundling is bookkeeping only: each flow started as its own call finishes when it would in a
bundle, no link ever carries more than its capacity, and every byte sent arrives."""

import simpy
from hypothesis import given, settings, strategies as st
import pytest

from scalesim.engine.network import FluidNetwork

INF = float("inf")


def _play(calls, capacity, together: bool, watch: list | None = None):
    """End time of each call (start_s, flows); `together` False starts every flow as its own call."""
    env = simpy.Environment()
    net = FluidNetwork(env, capacity)
    ends = [0.0] * len(calls)

    def call(i, start_s, flows):
        yield env.timeout(start_s)
        if together:
            yield net.start(flows)
        else:
            yield env.all_of([net.start([f]) for f in flows])
        ends[i] = env.now

    def monitor():
        for _ in range(40):
            yield env.timeout(0.1)
            load = [0.0] * len(capacity)
            for group in net._groups:
                for bundle in group.flows:
                    for path in bundle.paths:
                        for link in path:
                            load[link] += bundle.rate
            watch.append(load)

    for i, (start_s, flows) in enumerate(calls):
        env.process(call(i, start_s, flows))
    if watch is not None:
        env.process(monitor())
    env.run()
    return ends, net


flows = st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True).map(tuple),
                           st.sampled_from([50.0, 120.0, 300.0]),          # few sizes: calls form bundles
                           st.sampled_from([INF, INF, 40.0])), min_size=1, max_size=6)
calls = st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0]), flows), min_size=1, max_size=4)
capacities = st.lists(st.floats(20.0, 200.0), min_size=5, max_size=5)


@given(calls, capacities)
@settings(max_examples=100, deadline=None)
def test_a_call_ends_when_its_flows_would_end_each_on_its_own(calls, capacity):
    bundled, _ = _play(calls, capacity, together=True)
    alone, _ = _play(calls, capacity, together=False)
    assert bundled == [pytest.approx(t, rel=1e-12) for t in alone]


@given(calls, capacities)
@settings(max_examples=60, deadline=None)
def test_no_link_carries_more_than_its_capacity_and_every_byte_arrives(calls, capacity):
    watch: list = []
    _, net = _play(calls, capacity, together=True, watch=watch)
    for load in watch:
        assert all(used <= cap * (1 + 1e-9) for used, cap in zip(load, capacity))
    assert net.bytes_sent == sum(size for _, fl in calls for _, size, _ in fl)
    assert net.bytes_delivered == pytest.approx(net.bytes_sent, rel=1e-12)


def test_an_all_to_all_through_a_switch_is_a_few_bundles_and_takes_its_closed_form_time():
    # 8 ranks, each with an uplink (0-7) and a downlink (8-15) of 100 B/s to a switch; every rank
    # sends 70 B to each of the 7 others: 7 flows share each link, 100/7 B/s each, 4.9 s in all.
    # (Progressive filling rounds some shares one ulp apart: those flows form a second bundle.)
    flows = [((a, 8 + b), 70.0, INF) for a in range(8) for b in range(8) if a != b]
    env = simpy.Environment()
    net = FluidNetwork(env, [100.0] * 16)
    done = net.start(flows)
    (group,) = net._groups
    assert len(group.flows) <= 2 and sum(b.count for b in group.flows) == 56
    assert all(b.rate == pytest.approx(100.0 / 7, rel=1e-15) for b in group.flows)
    env.run(done)
    assert env.now == pytest.approx(70.0 / (100.0 / 7))
    assert net.bytes_delivered == net.bytes_sent == 56 * 70.0
