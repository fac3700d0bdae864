"""A phase whose links are free runs by formula until another flow touches them
(engine/reservations.py): the same arrival times and bytes as playing it through the network."""

import simpy
from hypothesis import given, settings, strategies as st
import pytest

from scalesim.engine.network import FluidNetwork

INF = float("inf")


def _play(calls, capacity, reserve: bool):
    """Per call (start_s, latency_s, repeats, flows): when each of its repeats ended; and the network.
    A call repeats its phase (latency, then its flows) back to back with the same flow list, as the
    buckets of a collective do; `reserve` lets a repeat run by formula where it can."""
    env = simpy.Environment()
    net = FluidNetwork(env, capacity)
    ends: list[list[float]] = [[] for _ in calls]
    reserved = [0]

    def call(i, start_s, latency_s, repeats, flows):
        yield env.timeout(start_s)
        for _ in range(repeats):
            reservation = net.reserve(flows, latency_s) if reserve else None
            if reservation is None:
                if latency_s > 0:
                    yield env.timeout(latency_s)
                yield net.start(flows)
            else:
                reserved[0] += 1
                yield reservation.timer
            ends[i].append(env.now)

    for i, (start_s, latency_s, repeats, flows) in enumerate(calls):
        env.process(call(i, start_s, latency_s, repeats, list(flows)))
    env.run()
    return ends, net, reserved[0]


def test_a_reserved_call_that_another_flow_touches_shares_its_link_from_then_on():
    # Link 0 carries 100 B/s. Call A moves 100 B twice: the first takes 1 s through the network, the
    # second (its rate now known) is reserved at 1 s. Call B starts 100 B at 1.5 s: A has 50 B left,
    # both get 50 B/s, A arrives at 2.5 s, B's last 50 B alone at 100 B/s: 3.0 s.
    calls = [(0.0, 0.0, 2, [((0,), 100.0, INF)]), (1.5, 0.0, 1, [((0,), 100.0, INF)])]
    ends, net, reserved = _play(calls, [100.0], reserve=True)
    assert reserved == 1
    assert ends == [[1.0, pytest.approx(2.5, rel=1e-12)], [pytest.approx(3.0, rel=1e-12)]]
    assert net.bytes_sent == net.bytes_delivered == 300.0


def test_a_reserved_call_touched_in_its_latency_starts_its_flows_for_real_after_it():
    # Each repeat of A waits 0.5 s of latency first: the first ends at 1.5 s, the second is reserved
    # then (its flows would start at 2 s). B starts 100 B at 1.7 s and moves 30 B alone; from 2 s both
    # move 50 B/s: B arrives at 3.4 s, A's last 30 B at 100 B/s: 3.7 s.
    calls = [(0.0, 0.5, 2, [((0,), 100.0, INF)]), (1.7, 0.0, 1, [((0,), 100.0, INF)])]
    ends, _, reserved = _play(calls, [100.0], reserve=True)
    assert reserved == 1
    assert ends == [[1.5, pytest.approx(3.7, rel=1e-12)], [pytest.approx(3.4, rel=1e-12)]]


def test_busy_links_are_not_reserved():
    # B holds link 0 from 0 s to 3 s: A's second repeat (at 2 s, link 0 busy) goes through the network.
    calls = [(0.0, 0.0, 2, [((0, 1), 100.0, INF)]), (0.5, 0.0, 1, [((0,), 200.0, INF)])]
    _, _, reserved = _play(calls, [100.0, 100.0], reserve=True)
    assert reserved == 0


flows = st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True).map(tuple),
                           st.sampled_from([50.0, 120.0]), st.sampled_from([INF, INF, 40.0])),
                 min_size=1, max_size=4)
calls = st.lists(st.tuples(st.sampled_from([0.0, 0.3, 1.0, 2.5]), st.sampled_from([0.0, 0.0, 0.2]),
                           st.integers(1, 4), flows), min_size=1, max_size=4)
capacities = st.lists(st.floats(20.0, 200.0), min_size=4, max_size=4)


@given(calls, capacities)
@settings(max_examples=150, deadline=None)
def test_reserving_gives_the_network_s_times_and_bytes(calls, capacity):
    fluid, plain, _ = _play(calls, capacity, reserve=False)
    reserved, net, _ = _play(calls, capacity, reserve=True)
    assert reserved == [[pytest.approx(t, rel=1e-9) for t in ends] for ends in fluid]
    assert net.bytes_sent == pytest.approx(plain.bytes_sent, rel=1e-12)
    assert net.bytes_delivered == pytest.approx(plain.bytes_delivered, rel=1e-12)
    assert not net._reserved and not net._groups


def _program(seed: int):
    """Two ranks of compute with blocking solo calls (one plan per rank, repeated: reserved once its
    rate is known) on links that the ranks' shared calls on another stream also use."""
    import random

    from scalesim.collectives.plan import CollectivePlan, Flow, Phase
    from scalesim.program import CollectiveTask, ComputeTask, Program

    draw = random.Random(seed)
    count = draw.randint(8, 20)
    at = sorted(draw.sample(range(count), draw.randint(1, 4)))          # both ranks call these together
    shared = [CollectivePlan("all_reduce", "ring", (0, 1), 1.0,
                             (Phase(draw.choice([0.0, 0.1]), (Flow("a", "b", links, size), Flow("b", "a", links, size))),))
              for size, links in ((draw.choice([0.5, 2.0]), draw.choice([(0,), (1,), (0, 1)])) for _ in at)]
    tasks = {}
    for rank in (0, 1):
        solo = CollectivePlan("all_reduce", "ring", (rank,), 1.0,
                              (Phase(draw.choice([0.0, 0.05]), (Flow("x", "y", (rank,), draw.choice([0.4, 1.0])),)),))
        listed, last = [], None
        for j in range(count):
            listed.append(ComputeTask(f"c{j}", "forward", draw.choice([0.1, 0.3, 0.7]),
                                      deps=() if last is None else (last,)))
            last = len(listed) - 1
            if draw.random() < 0.6:
                listed.append(CollectiveTask(f"s{j}", f"s{rank}-{j}", solo, deps=(last,), stream="tp",
                                             participants=1, sm_share=draw.choice([0.0, 0.25])))
                last = len(listed) - 1
            if j in at:
                k = at.index(j)
                listed.append(CollectiveTask(f"g{k}", f"g{k}", shared[k], deps=(last,), stream="comm",
                                             sm_share=draw.choice([0.0, 0.2])))
        tasks[rank] = tuple(listed)
    return Program(tasks, (2.0, 2.0))


@pytest.mark.parametrize("first_seed", range(0, 300, 100))
def test_random_programs_with_reserved_calls_give_the_played_timeline(first_seed):
    from scalesim.engine import simulate

    for seed in range(first_seed, first_seed + 100):
        program = _program(seed)
        fast, played = simulate(program), simulate(program, closed_form=False)
        assert fast.end_s == pytest.approx(played.end_s, rel=1e-9), seed
        ordered = sorted(fast.intervals, key=lambda i: (i.rank, i.name)), sorted(played.intervals,
                                                                                 key=lambda i: (i.rank, i.name))
        for a, b in zip(*ordered):
            assert (a.rank, a.name) == (b.rank, b.name), seed
            assert (a.start_s, a.end_s) == pytest.approx((b.start_s, b.end_s), rel=1e-9, abs=1e-12), seed
        assert fast.bytes_sent == pytest.approx(played.bytes_sent, rel=1e-12)
