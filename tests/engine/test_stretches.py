"""Stretches: runs of a walk's tasks played as one timer give the task-by-task timeline, to the bit."""

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
