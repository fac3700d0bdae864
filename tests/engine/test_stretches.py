"""Stretches: runs of a walk's tasks played as one timer give the task-by-task timeline (to the bit on
the programs below; within 1e-12 on random ones, where same-instant calls may add SM shares in
another order)."""

import random
from pathlib import Path

import pytest

from scalesim.app.setup import prepare
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.engine import simulate
import simpy

from scalesim.engine.stretches import timer_at
from scalesim.program import CollectiveTask, ComputeTask, Program
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def same(program: Program) -> None:
    fast, walked = simulate(program), simulate(program, stretches=False)
    assert fast.intervals == walked.intervals
    assert (fast.end_s, fast.compute_slowdown_s) == (walked.end_s, walked.compute_slowdown_s)
    assert fast.bytes_sent == pytest.approx(walked.bytes_sent, rel=1e-12)


def test_a_call_taking_sms_in_the_middle_of_a_stretch_slows_the_compute_it_overlaps_as_task_by_task():
    plan = CollectivePlan("send_recv", "direct", (0, 1), 0.0, (Phase(0.0, (Flow("a", "b", (0,), 30.0),)),))
    comm = CollectiveTask("grads", "g", plan, stream="comm", participants=0, sm_share=0.5, deps=(0,))
    compute = tuple(ComputeTask(f"layer{i}", "backward", 1.0, deps=(i - 1,) if i else ()) for i in range(8))
    program = Program({0: compute + (comm,), 1: compute + (comm,)}, (10.0,))
    same(program)
    # the call runs from 1 s to 4 s on half the SMs: the compute after layer0 takes longer than 7 s
    assert simulate(program).for_rank(0)[-1].end_s > 8.0


def test_host_waits_inside_a_stretch_are_the_walks():
    tasks = tuple(ComputeTask(f"k{i}", "forward", 0.5 if i % 2 else 3.0, deps=(i - 1,) if i else (), host_s=1.0,
                              host_sync=i == 5) for i in range(9))
    same(Program({0: tasks}, ()))


@pytest.mark.parametrize("name, changes", [
    ("scenarios/8x4090-ddp.yaml", {}),                                              # bucketed all-reduce under backward
    ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 16}}),       # TP+SP chains, interleaved PP
    ("scenarios/2x4090-llama2-70b-qlora.yaml", {}),                                  # FSDP gathers, offload
])
def test_shipped_steps_are_the_same_with_and_without_stretches(name, changes):
    scenario, file = load_scenario(ROOT / name)
    same(prepare(scenario.with_changes(**changes) if changes else scenario, file).step.program)


def test_a_timer_lands_exactly_where_the_walk_would_have_been():
    # 0.11746376363643816 + any delay never equals 0.24473681847128134 (the sum rounds past it)
    for now_s, at_s in ((0.11746376363643816, 0.24473681847128134), (0.1, 0.30000000000000004), (5.0, 5.0)):
        env = simpy.Environment(initial_time=now_s)
        fired = []
        timer_at(env, at_s).callbacks.append(lambda _event: fired.append(env.now))
        env.run()
        assert fired == [at_s]


def _random_program(seed: int) -> Program:
    """Two ranks of compute chains with calls on two streams (some holding SMs, some waited for by
    later compute), solo calls on a third and host costs: what stretches start, break and resume on."""
    draw = random.Random(seed)
    count = draw.randint(6, 16)
    at = sorted(draw.sample(range(count), draw.randint(2, 6)))
    plans = [CollectivePlan("all_reduce", "ring", (0, 1), size,
                            (Phase(draw.choice([0.0, 0.25]), (Flow("a", "b", links, size), Flow("b", "a", links, size))),))
             for size, links in ((draw.choice([0.5, 1.0, 3.0]), draw.choice([(0,), (1,), (0, 1)])) for _ in at)]
    shares = [draw.choice([0.0, 0.1, 0.2, 0.25, 0.3]) for _ in at]
    streams = [draw.choice(["comm", "comm2"]) for _ in at]
    waits = {draw.randint(p + 1, count - 1): k for k, p in enumerate(at) if p + 2 < count and draw.random() < 0.5}
    host = draw.random() < 0.4
    tasks = {}
    for rank in (0, 1):
        listed, last, calls = [], None, {}
        for j in range(count):
            deps = (() if last is None else (last,)) + ((calls[waits[j]],) if waits.get(j) in calls else ())
            listed.append(ComputeTask(f"c{j}", "forward", draw.choice([0.1, 0.2, 0.3, 0.7, 0.25]), deps=deps,
                                      host_s=draw.choice([0.0, 0.1, 0.5]) if host else 0.0,
                                      host_sync=host and draw.random() < 0.1))
            last = len(listed) - 1
            if draw.random() < 0.2:
                solo = CollectivePlan("all_reduce", "ring", (rank,), 1.0,
                                      (Phase(0.0, (Flow("x", "y", (2 + rank,), draw.choice([1.0, 2.0])),)),))
                listed.append(CollectiveTask(f"s{j}", f"s{rank}-{j}", solo, deps=(last,), stream="tp",
                                             participants=1, sm_share=draw.choice([0.0, 0.25])))
                last = len(listed) - 1 if draw.random() < 0.7 else last
            for k, p in enumerate(at):
                if p == j:
                    calls[k] = len(listed)
                    listed.append(CollectiveTask(f"g{k}", f"g{k}", plans[k], deps=(last,), sm_share=shares[k],
                                                 stream=streams[k]))
        tasks[rank] = tuple(listed)
    return Program(tasks, (2.0, 4.0, 1.0, 1.0))


@pytest.mark.parametrize("first_seed", range(0, 400, 100))
def test_random_programs_give_the_walks_timeline_to_within_a_few_ulps(first_seed):
    for seed in range(first_seed, first_seed + 100):
        program = _random_program(seed)
        fast, walked = simulate(program), simulate(program, stretches=False)
        assert fast.end_s == pytest.approx(walked.end_s, rel=1e-12), seed
        assert len(fast.intervals) == len(walked.intervals), seed
        for a, b in zip(fast.intervals, walked.intervals):
            assert (a.rank, a.name, a.kind) == (b.rank, b.name, b.kind), seed
            assert (a.ready_s, a.start_s, a.end_s) == pytest.approx((b.ready_s, b.start_s, b.end_s), rel=1e-12,
                                                                    abs=1e-12), seed
        for rank in set(fast.compute_slowdown_s) | set(walked.compute_slowdown_s):
            assert fast.compute_slowdown_s.get(rank, 0.0) == pytest.approx(
                walked.compute_slowdown_s.get(rank, 0.0), abs=1e-12), seed
