"""Timelines small enough to compute by hand: streams, dependencies, rendezvous, shared links."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.engine import simulate
from scalesim.program import CollectiveTask, ComputeTask, Program


def transfer(ranks, flows, latency_s=0.0, key="c"):
    return CollectivePlan("send_recv", "direct", ranks, 0.0,
                          (Phase(latency_s, tuple(Flow("a", "b", links, size) for links, size in flows)),))


def spans(timeline, rank):
    return [(iv.name, iv.start_s, iv.end_s) for iv in timeline.for_rank(rank)]


def test_tasks_on_one_stream_run_in_order_and_streams_overlap():
    plan = transfer((0,), [((0,), 100.0)])
    program = Program({0: (
        ComputeTask("a", "forward", 1.0),
        ComputeTask("b", "backward", 2.0, deps=(0,)),
        CollectiveTask("c", "k", plan, deps=(0,)),      # starts after a, overlaps b
    )}, (50.0,))
    t = simulate(program)
    assert sorted(spans(t, 0)) == [("a", 0.0, 1.0), ("b", 1.0, 3.0), ("c", 1.0, 3.0)]
    assert t.end_s == 3.0


def test_collective_starts_when_the_last_rank_arrives():
    plan = transfer((0, 1), [((0,), 10.0)], latency_s=0.5)
    task = lambda: CollectiveTask("ar", "k", plan, deps=(0,))
    program = Program({0: (ComputeTask("f", "forward", 1.0), task()),
                       1: (ComputeTask("f", "forward", 3.0), task())}, (10.0,))
    t = simulate(program)
    ar0 = [iv for iv in t.for_rank(0) if iv.name == "ar"][0]
    assert (ar0.ready_s, ar0.start_s, ar0.end_s) == (1.0, 3.0, 4.5)   # 0.5 latency + 10 B at 10 B/s


def test_two_flows_on_one_link_each_get_half_and_finish_together():
    plan = transfer((0,), [((0,), 100.0), ((0,), 100.0)])
    t = simulate(Program({0: (CollectiveTask("x", "k", plan),)}, (100.0,)))
    assert t.end_s == pytest.approx(2.0)


def test_a_flow_speeds_up_when_its_competitor_finishes():
    # 50 B and 150 B on a 100 B/s link: both at 50 B/s until t=1, then the rest at 100 B/s.
    plan = transfer((0,), [((0,), 50.0), ((0,), 150.0)])
    t = simulate(Program({0: (CollectiveTask("x", "k", plan),)}, (100.0,)))
    assert t.end_s == pytest.approx(2.0)


def test_separate_calls_share_a_link_while_they_overlap():
    a = transfer((0,), [((0,), 100.0)])
    b = transfer((1,), [((0,), 100.0)])
    program = Program({0: (CollectiveTask("a", "ka", a),), 1: (CollectiveTask("b", "kb", b),)}, (100.0,))
    assert simulate(program).end_s == pytest.approx(2.0)


def test_bytes_sent_equal_bytes_delivered():
    plan = transfer((0,), [((0, 1), 70.0), ((1,), 30.0), ((2,), 5.0)])
    t = simulate(Program({0: (CollectiveTask("x", "k", plan),)}, (10.0, 20.0, 1.0)))
    assert t.bytes_sent == t.bytes_delivered == 105.0


def test_same_program_gives_the_same_timeline():
    plan = transfer((0, 1), [((0,), 30.0), ((0, 1), 20.0)])
    program = Program({r: (ComputeTask("f", "forward", 0.1 * (r + 1)), CollectiveTask("c", "k", plan, deps=(0,)))
                       for r in (0, 1)}, (7.0, 3.0))
    assert simulate(program) == simulate(program)


def test_a_collective_missing_a_rank_is_reported():
    plan = transfer((0, 1), [((0,), 1.0)])
    with pytest.raises(RuntimeError, match="never completed"):
        simulate(Program({0: (CollectiveTask("c", "k", plan),)}, (1.0,)))


def test_calls_alone_on_their_links_take_the_closed_form_time_and_others_are_played_out():
    from scalesim.engine.simulator import isolated_plans
    alone = transfer((0,), [((0,), 100.0)])
    shared_a = transfer((1,), [((1,), 100.0)])
    shared_b = transfer((2,), [((1,), 50.0)])
    program = Program({0: (CollectiveTask("a", "ka", alone), CollectiveTask("a2", "ka2", alone)),
                       1: (CollectiveTask("b", "kb", shared_a),), 2: (CollectiveTask("c", "kc", shared_b),)},
                      (10.0, 10.0))
    assert set(isolated_plans(program)) == {id(alone)}
    fast, played = simulate(program), simulate(program, closed_form=False)
    assert fast == played
    assert fast.end_s == pytest.approx(20.0)     # two 10 s calls in a row; the shared pair ends at 15 s


def test_a_residue_too_small_for_the_clock_still_finishes():
    # At t = 1e6 s a few bytes at 1 TB/s take less than the clock's resolution.
    plan = transfer((0,), [((0,), 1e12 * 1e-12 + 5.0)])
    program = Program({0: (ComputeTask("wait", "forward", 1e6), CollectiveTask("x", "k", plan, deps=(0,)))},
                      (1e12,))
    assert simulate(program, closed_form=False).end_s == pytest.approx(1e6)


def test_flows_on_links_no_other_call_uses_are_timed_alone_and_the_step_is_unchanged():
    from scalesim.engine.simulator import private_splits
    # A ring-like call: edges on links 0,1 (private; 0 is used twice) and one edge on link 2,
    # which a second call also crosses. Only the edge on link 2 must be played out.
    ring = transfer((0, 1), [((0,), 40.0), ((0, 1), 40.0), ((2,), 60.0)])
    other = transfer((2,), [((2,), 30.0)])
    program = Program({0: (CollectiveTask("r", "kr", ring),), 1: (CollectiveTask("r", "kr", ring),),
                       2: (ComputeTask("f", "forward", 1.0), CollectiveTask("o", "ko", other, deps=(0,)))},
                      (10.0, 100.0, 20.0))
    split = private_splits(program, {})
    ((exposed, private_s, private_bytes),) = split[id(ring)]
    assert [f.links for f in exposed] == [(2,)]
    assert private_s == pytest.approx(8.0)          # 80 B through link 0 at 10 B/s
    assert private_bytes == 80.0
    fast, played = simulate(program), simulate(program, closed_form=False)
    assert fast.end_s == pytest.approx(played.end_s)
    assert fast.bytes_sent == fast.bytes_delivered == played.bytes_sent
    # link 2: the edge alone for 1 s (20 B), then shared 10/10 B/s until the other call's 30 B are done
    assert played.end_s == pytest.approx(8.0)


def test_one_plan_object_used_on_two_streams_at_once_shares_its_links():
    # Plans are memoised, so two concurrent calls can carry the same plan object.
    plan = transfer((0,), [((0,), 100.0)])
    program = Program({0: (CollectiveTask("a", "ka", plan, stream="x"), CollectiveTask("b", "kb", plan, stream="y"))},
                      (100.0,))
    assert simulate(program).end_s == pytest.approx(2.0) == simulate(program, closed_form=False).end_s


# ------------------------------------------------------------ SMs held by communication kernels

def test_compute_slows_while_a_collective_holds_part_of_the_sms():
    # A 2 s compute; a 1 s transfer holding a quarter of the SMs starts with it.
    # First second: 0.75 s of work done; the remaining 1.25 s at full speed: ends at 2.25 s.
    plan = transfer((0,), [((0,), 100.0)])
    program = Program({0: (
        ComputeTask("b", "backward", 2.0),
        CollectiveTask("c", "k", plan, sm_share=0.25),
    )}, (100.0,))
    t = simulate(program)
    assert sorted(spans(t, 0)) == [("b", 0.0, pytest.approx(2.25)), ("c", 0.0, pytest.approx(1.0))]


def test_compute_that_starts_and_ends_inside_a_call_runs_at_the_reduced_rate():
    plan = transfer((0,), [((0,), 1000.0)])                    # 10 s at 100 B/s
    program = Program({0: (
        CollectiveTask("c", "k", plan, sm_share=0.5),
        ComputeTask("f", "forward", 1.0),
    )}, (100.0,))
    f = [iv for iv in simulate(program).for_rank(0) if iv.name == "f"][0]
    assert f.end_s - f.start_s == pytest.approx(2.0)


def test_a_task_that_knows_its_slow_down_under_a_share_takes_it_and_falls_back_otherwise():
    # The builder gives each compute task its own factor per share (its GEMMs' waves on the
    # SMs left); a share it was not told about slows it to the SMs left, 1 / (1 - share).
    plan = transfer((0,), [((0,), 1000.0)])                    # 10 s at 100 B/s: covers the compute
    def forward_span(share, factors):
        program = Program({0: (CollectiveTask("c", "k", plan, sm_share=share),
                               ComputeTask("f", "forward", 1.0, held=0 if factors else -1))}, (100.0,),
                          held_factors=(factors,) if factors else ())
        f = [iv for iv in simulate(program).for_rank(0) if iv.name == "f"][0]
        return f.end_s - f.start_s
    assert forward_span(0.25, ((0.25, 1.9),)) == pytest.approx(1.9)     # a one-wave GEMM going to two
    assert forward_span(0.25, ((0.5, 1.9),)) == pytest.approx(1 / 0.75)
    assert forward_span(0.25, ()) == pytest.approx(1 / 0.75)


def test_without_sm_share_overlap_is_free_and_with_it_never_faster():
    plan = transfer((0,), [((0,), 100.0)])
    def step(share):
        return simulate(Program({0: (ComputeTask("b", "backward", 2.0),
                                     CollectiveTask("c", "k", plan, sm_share=share))}, (100.0,))).end_s
    assert step(0.0) == pytest.approx(2.0)
    ends = [step(s) for s in (0.0, 0.1, 0.2, 0.4)]
    assert ends == sorted(ends) and ends[-1] > ends[0]


def test_a_call_slows_only_the_ranks_that_take_part_and_exposed_communication_costs_nothing_extra():
    plan = transfer((0,), [((0,), 100.0)])
    program = Program({
        0: (CollectiveTask("c", "k", plan, sm_share=0.5), ComputeTask("f", "forward", 1.0, deps=(0,))),
        1: (ComputeTask("f", "forward", 1.0),),
    }, (100.0,))
    t = simulate(program)
    assert spans(t, 0) == [("c", 0.0, 1.0), ("f", 1.0, 2.0)]    # compute after the call: full speed
    assert spans(t, 1) == [("f", 0.0, 1.0)]


def test_work_on_the_host_stream_is_not_slowed_by_sms_held_on_the_gpu():
    plan = transfer((0,), [((0,), 100.0)])
    program = Program({0: (
        CollectiveTask("c", "k", plan, sm_share=0.5),
        ComputeTask("adam", "optimizer", 1.0, stream="cpu"),
    )}, (100.0,))
    adam = [iv for iv in simulate(program).for_rank(0) if iv.name == "adam"][0]
    assert adam.end_s == pytest.approx(1.0)


def test_a_component_that_comes_apart_is_reshared_and_other_components_keep_their_rates():
    # A on link 0; B on links 0 and 1; C on link 1: one component, everyone at 50 B/s.
    # D alone on link 2 at 100 B/s. A ends at 1 s (50 B); C then shares link 1 with B
    # and ends at 2 s; B runs alone at 100 B/s: 300 - 50 - 50 = 200 B left at 2 s -> 4 s.
    a, b = transfer((0,), [((0,), 50.0)]), transfer((1,), [((0, 1), 300.0)])
    c, d = transfer((2,), [((1,), 100.0)]), transfer((3,), [((2,), 100.0)])
    program = Program({0: (CollectiveTask("a", "ka", a),), 1: (CollectiveTask("b", "kb", b),),
                       2: (CollectiveTask("c", "kc", c),), 3: (CollectiveTask("d", "kd", d),)},
                      (100.0, 100.0, 100.0))
    t = simulate(program, closed_form=False)
    ends = {iv.name: iv.end_s for iv in t.intervals}
    assert ends == {"a": pytest.approx(1.0), "b": pytest.approx(4.0), "c": pytest.approx(2.0),
                    "d": pytest.approx(1.0)}
    assert t.bytes_sent == pytest.approx(t.bytes_delivered)


def _blocking_chain(next_waits: bool):
    # compute -> a call only this rank takes part in -> compute (waiting for the call, or not)
    plan = transfer((0, 1), [((0,), 100.0)])                         # 1 s alone on its link
    call = CollectiveTask("tp all_reduce", "k", plan, deps=(0,), stream="tp", participants=1)
    return Program({0: (ComputeTask("a", "forward", 1.0), call,
                        ComputeTask("b", "forward", 1.0, deps=(1,) if next_waits else (0,)))}, (100.0,))


@pytest.mark.parametrize("next_waits", [True, False])
def test_solo_calls_timed_by_formula_give_the_timeline_the_fluid_network_gives(next_waits):
    program = _blocking_chain(next_waits)
    fast, played = simulate(program), simulate(program, closed_form=False)
    assert spans(fast, 0) == [(n, pytest.approx(s), pytest.approx(e)) for n, s, e in spans(played, 0)]
    assert {iv.stream for iv in fast.intervals} == {"compute", "tp"}     # the call keeps its stream
    assert fast.end_s == pytest.approx(3.0 if next_waits else 2.0)


# ------------------------------------------------------------ the fluid network against a plain reference

def _reference_finish_times(flows, capacity):
    """Finish time of each (start_s, links, size) flow: global max-min rates recomputed at every event."""
    from scalesim.fairshare import max_min_rates
    now, left, done = 0.0, {}, {}
    pending = sorted(range(len(flows)), key=lambda i: flows[i][0])
    while pending or left:
        active = sorted(left)
        rates = dict(zip(active, max_min_rates([flows[i][1] for i in active], capacity))) if active else {}
        next_start = flows[pending[0]][0] if pending else float("inf")
        next_end = min((left[i] / rates[i] for i in active), default=float("inf"))
        step = min(next_start - now, next_end)
        for i in active:
            left[i] -= rates[i] * step
        now += step
        for i in active:
            if left[i] <= 1e-9 * flows[i][2]:
                done[i] = now
                del left[i]
        while pending and flows[pending[0]][0] <= now:
            i = pending.pop(0)
            left[i] = flows[i][2]
    return [done[i] for i in range(len(flows))]


flow_sets = st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5]),
                               st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True).map(tuple),
                               st.floats(10.0, 500.0)), min_size=1, max_size=7)


@given(flow_sets, st.lists(st.floats(20.0, 200.0), min_size=5, max_size=5))
@example(  # three 10 B flows on link 2 had under a millibyte left when another flow ended: they ended then too
    flows=[(0.0, (0,), 10.0), (0.5, (0,), 10.0), (0.5, (2,), 10.0), (0.5, (2,), 10.0), (0.5, (2,), 10.0)],
    capacity=[60.0, 20.0, 179.984375, 20.0, 20.0])
@settings(max_examples=150, deadline=None)
def test_flows_finish_when_global_max_min_sharing_says(flows, capacity):
    # Each flow is its own call on its own rank, started after a compute task of its start time.
    program = Program({rank: ((ComputeTask("wait", "other", start),) if start else ())
                       + (CollectiveTask("x", f"k{rank}", transfer((rank,), [(links, size)]),
                                         deps=(0,) if start else ()),)
                       for rank, (start, links, size) in enumerate(flows)}, tuple(capacity))
    t = simulate(program, closed_form=False)
    ends = [max(iv.end_s for iv in t.for_rank(rank)) for rank in range(len(flows))]
    assert ends == [pytest.approx(e, rel=1e-6) for e in _reference_finish_times(flows, capacity)]
    assert t.bytes_sent == pytest.approx(t.bytes_delivered)


def _flow_ends(flows, capacity, closed_form):
    program = Program({rank: ((ComputeTask("wait", "other", start),) if start else ())
                       + (CollectiveTask("x", f"k{rank}", transfer((rank,), [(links, size)]),
                                         deps=(0,) if start else ()),)
                       for rank, (start, links, size) in enumerate(flows)}, tuple(capacity))
    t = simulate(program, closed_form=closed_form)
    return [max(iv.end_s for iv in t.for_rank(rank)) for rank in range(len(flows))]


@given(flow_sets, st.lists(st.floats(20.0, 200.0), min_size=5, max_size=5), st.integers(-30, 30),
       st.booleans())
@example(flows=[(0.0, (0,), 10.0), (0.0, (1,), 10.0 + 1e-4)], capacity=[10.0] * 5, exponent=10, closed_form=False)
@settings(max_examples=60, deadline=None)
def test_the_unit_of_bytes_does_not_change_when_flows_end(flows, capacity, exponent, closed_form):
    # Sizes and capacities times 2**exponent (exact in floats): the same times, small flows or large.
    # When a flow ends is a matter of its bytes over its rate, never of how many bytes it has left.
    scale = 2.0 ** exponent
    scaled = [(start, links, size * scale) for start, links, size in flows]
    ends = _flow_ends(scaled, [c * scale for c in capacity], closed_form)
    assert ends == [pytest.approx(e, rel=1e-12) for e in _flow_ends(flows, capacity, closed_form)]
