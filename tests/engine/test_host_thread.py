"""The host thread: kernels cannot start before the CPU has issued them."""

import pytest

from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.engine import simulate
from scalesim.program import CollectiveTask, ComputeTask, Program


def spans(timeline, rank=0):
    return [(iv.name, iv.start_s, iv.end_s) for iv in timeline.for_rank(rank)]


def test_short_kernels_wait_for_the_host_that_issues_them_one_after_another():
    program = Program({0: (ComputeTask("a", "forward", 1.0, host_s=10.0),
                           ComputeTask("b", "forward", 1.0, deps=(0,), host_s=10.0))}, ())
    t = simulate(program)
    assert spans(t) == [("a", 10.0, 11.0), ("b", 20.0, 21.0)]
    assert t.for_rank(0)[1].ready_s == 11.0      # its input was ready at 11; the host issued it at 20


def test_long_kernels_hide_the_host_behind_them():
    program = Program({0: (ComputeTask("a", "forward", 100.0, host_s=10.0),
                           ComputeTask("b", "forward", 100.0, deps=(0,), host_s=10.0))}, ())
    assert simulate(program).end_s == 210.0      # only the first issue is exposed


def test_after_a_sync_the_host_issues_nothing_until_the_task_has_finished():
    program = Program({0: (ComputeTask("loss.item", "forward", 50.0, host_s=1.0, host_sync=True),
                           ComputeTask("next", "forward", 5.0, host_s=2.0))}, ())
    assert spans(simulate(program)) == [("loss.item", 1.0, 51.0), ("next", 53.0, 58.0)]


def test_a_rank_reaches_a_call_when_its_host_has_issued_it():
    plan = CollectivePlan("send_recv", "direct", (0, 1), 0.0, (Phase(0.0, (Flow("a", "b", (0,), 10.0),)),))
    call = lambda host_s: CollectiveTask("ar", "k", plan, host_s=host_s)
    t = simulate(Program({0: (call(3.0),), 1: (call(1.0),)}, (10.0,)))
    ar = {iv.rank: iv for iv in t.intervals}
    assert (ar[0].ready_s, ar[1].ready_s, ar[0].start_s, ar[0].end_s) == (3.0, 1.0, 3.0, 4.0)


def test_no_host_cost_gives_the_timeline_without_a_host():
    tasks = (ComputeTask("a", "forward", 1.0), ComputeTask("b", "backward", 2.0, deps=(0,)))
    with_zero = tuple(ComputeTask(t.name, t.kind, t.duration_s, t.deps, host_s=0.0) for t in tasks)
    assert simulate(Program({0: tasks}, ())) == simulate(Program({0: with_zero}, ()))


@pytest.mark.parametrize("host_s", [0.5, 2.0, 8.0])
def test_a_slower_host_is_never_faster(host_s):
    def end(h):
        return simulate(Program({0: tuple(ComputeTask(f"k{i}", "forward", 1.0, deps=(i - 1,) if i else (),
                                                      host_s=h) for i in range(20))}, ())).end_s
    assert end(host_s) <= end(host_s * 1.5)
