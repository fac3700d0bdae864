"""Fast-forward through repeating periods gives the full simulation's timeline (engine/fast_forward.py).

validation/fast_forward_equality.py does the same for every shipped and validation scenario (by hand).
"""

from pathlib import Path

import pytest

from scalesim.app.setup import prepare
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.engine import fast_forward as ff
from scalesim.engine import simulate
from scalesim.engine.fast_forward import exact_simulation
from scalesim.engine.periods import find_windows
from scalesim.engine.simulator import played
from scalesim.program import CollectiveTask, ComputeTask, Program
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def same_timeline(fast, full) -> None:
    """Same step time, bytes, slowdowns and intervals (matched per rank and stream), within 1e-9 of the step."""
    assert fast.end_s == pytest.approx(full.end_s, rel=1e-9)
    assert fast.bytes_sent == pytest.approx(full.bytes_sent, rel=1e-9)
    assert fast.bytes_delivered == pytest.approx(full.bytes_delivered, rel=1e-9)
    assert fast.compute_slowdown_s.keys() == full.compute_slowdown_s.keys()
    for rank, slowed in full.compute_slowdown_s.items():
        assert fast.compute_slowdown_s[rank] == pytest.approx(slowed, rel=1e-9, abs=1e-9 * full.end_s)
    assert len(fast.intervals) == len(full.intervals)
    order = lambda iv: (iv.rank, iv.stream, iv.start_s, iv.name)             # noqa: E731
    tolerance = 1e-9 * full.end_s
    for a, b in zip(sorted(fast.intervals, key=order), sorted(full.intervals, key=order)):
        assert (a.rank, a.stream, a.name, a.kind) == (b.rank, b.stream, b.name, b.kind)
        assert abs(a.ready_s - b.ready_s) <= tolerance and abs(a.start_s - b.start_s) <= tolerance
        assert abs(a.end_s - b.end_s) <= tolerance


def pipeline(micro_batches: int, stages: int = 3, shared_link: bool = True) -> Program:
    """A GPipe-like chain: each stage computes a micro-batch, then sends it on (a call with the next
    stage), and a gradient call per micro-batch shares one link with the sends when `shared_link`."""
    tasks = {}
    for s in range(stages):
        # one plan object per kind of call, as the builder memoises them
        recv = CollectivePlan("send_recv", "direct", (s - 1, s), 0.0, (Phase(1e-6, (Flow("a", "b", (s - 1,), 4e6),)),))
        send = CollectivePlan("send_recv", "direct", (s, s + 1), 0.0, (Phase(1e-6, (Flow("a", "b", (s,), 4e6),)),))
        link = (stages - 1) if shared_link else stages + s
        grad = CollectivePlan("all_reduce", "ring", (s,), 0.0, (Phase(0.0, (Flow("g", "h", (link,), 2e6),)),))
        own = []
        for mb in range(micro_batches):
            deps = (len(own) - 1,) if own else ()
            if s > 0:
                own.append(CollectiveTask(f"recv mb{mb}", f"p2p/{s - 1}/{mb}", recv, deps))
                deps = (len(own) - 1,)
            own.append(ComputeTask(f"fwd mb{mb}", "forward", 1e-3 * (1 + s % 2), deps))
            own.append(CollectiveTask(f"grad mb{mb}", f"grad/{s}/{mb}", grad, (len(own) - 1,), stream="grads",
                                      participants=1, sm_share=0.2))
            if s < stages - 1:
                own.append(CollectiveTask(f"send mb{mb}", f"p2p/{s}/{mb}", send, (len(own) - 2,)))
        own.append(ComputeTask("optimizer", "optimizer", 2e-3, tuple(range(len(own)))[-2:]))
        tasks[s] = tuple(own)
    return Program(tasks, (8e9,) * (2 * stages + 1))


@pytest.fixture
def small_steps(monkeypatch):
    monkeypatch.setattr(ff, "MIN_TASKS", 0)          # fast-forward even these small programs,
    monkeypatch.setattr("scalesim.engine.periods.MIN_SKIPPED", 0.1)     # however few periods they skip


def test_a_pipeline_fast_forwarded_is_the_full_simulation(small_steps):
    program = pipeline(200)
    windows = find_windows(program)
    assert windows is not None and all(w.copies > 100 for w in windows.values())
    fast = ff.fast_forward(program, played)
    assert fast is not None                           # the periods were skipped
    same_timeline(fast, simulate(program, exact=True))


def test_the_step_time_alone_is_the_fast_forwarded_timelines_end_to_the_last_bit(small_steps):
    from scalesim.engine import step_time_s

    for program in (pipeline(200), pipeline(7)):           # fast-forwarded, and played whole
        assert step_time_s(program) == simulate(program).end_s
        assert step_time_s(program, exact=True) == simulate(program, exact=True).end_s


def test_the_second_shortened_play_done_beside_gives_the_same_timeline_bit_for_bit(small_steps):
    import os

    from scalesim.app.forked import Forked

    started = []

    def beside(work):
        started.append(work)
        return Forked(work, fork=hasattr(os, "fork"))

    program = pipeline(200)
    here = simulate(program)
    there = simulate(program, beside=beside)
    assert started and there == here                         # the same floats, not just close
    assert simulate(pipeline(7), beside=beside) == simulate(pipeline(7))     # played whole: nothing beside


def test_contention_between_stages_on_their_own_links_fast_forwards_too(small_steps):
    program = pipeline(120, stages=4, shared_link=False)
    fast = ff.fast_forward(program, played)
    assert fast is not None
    same_timeline(fast, simulate(program, exact=True))


def test_a_step_whose_pattern_drifts_is_played_whole(small_steps):
    # The second stage's compute grows a little every micro-batch: no two periods are alike in
    # time, though every task looks the same but for its duration... which the signature sees.
    program = pipeline(150)
    drifting = tuple(ComputeTask(t.name, t.kind, t.duration_s * (1 + 1e-3 * i), t.deps, t.stream)
                     if isinstance(t, ComputeTask) else t for i, t in enumerate(program.tasks[1]))
    program = Program({**program.tasks, 1: drifting}, program.link_capacity_bytes_per_s)
    assert ff.fast_forward(program, played) is None
    same_timeline(simulate(program), simulate(program, exact=True))


def test_the_check_refuses_a_skip_the_shortened_steps_do_not_support(small_steps, monkeypatch):
    # Cut right after the first period: the pipeline is still filling there, so one more period
    # does not just shift what follows, and the fast-forward must give up (or still be exact).
    monkeypatch.setattr("scalesim.engine.periods.KEEP_BEFORE", 1)
    program = pipeline(200, stages=4)
    fast = ff.fast_forward(program, played)
    if fast is not None:
        same_timeline(fast, simulate(program, exact=True))


def test_exact_simulation_plays_every_task(small_steps, monkeypatch):
    program = pipeline(60)
    monkeypatch.setattr("scalesim.engine.simulator.fast_forward", lambda *a: pytest.fail("fast-forwarded"))
    with exact_simulation():
        simulate(program)
    simulate(program, exact=True)


@pytest.mark.parametrize("name, changes", [
    # 1F1B over 16 stages, TP all-reduces, DP gradients in the cool-down (48 micro-batches, not 192)
    ("scenarios/1024xa100-gpt3-175b.yaml", {"training": {"global_batch": 384}}),
    # interleaved 1F1B (a period is a round of 4 micro-batches over 5 chunks), sequence parallelism
    ("scenarios/64xh100-llama3-70b.yaml", {}),
])
def test_shipped_pipelines_fast_forwarded_are_the_full_simulation(name, changes, small_steps):
    scenario, file = load_scenario(ROOT / name)
    program = prepare(scenario.with_changes(**changes) if changes else scenario, file).step.program
    fast = ff.fast_forward(program, played)
    assert fast is not None
    same_timeline(fast, simulate(program, exact=True))



def test_exact_reaches_the_processes_that_simulate_sweeps_and_validate():
    from scalesim.app.executors import ExecutorSpec, completed, open_pool
    from scalesim.engine.fast_forward import exact_requested

    with open_pool(ExecutorSpec("local", 1)) as pool:
        assert [r for _, r in completed(pool, exact_requested, [()])] == [False]
        with exact_simulation():
            assert [r for _, r in completed(pool, exact_requested, [(), ()])] == [True, True]


@pytest.mark.parametrize("command", [["run", "scenarios/8x4090-ddp.yaml", "--no-plots", "--no-scaling"]])
def test_the_exact_option_plays_every_task(command, monkeypatch):
    from click.testing import CliRunner

    from scalesim.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("scalesim.engine.simulator.fast_forward", lambda *a: pytest.fail("fast-forwarded"))
    assert CliRunner().invoke(main, [*command, "--exact", "--json"]).exit_code == 0


def test_windows_found_from_what_may_repeat_saw_are_the_windows_found_afresh(small_steps):
    from scalesim.engine.periods import may_repeat

    for program in (pipeline(200), pipeline(120, stages=4, shared_link=False)):
        seen: dict = {}
        assert may_repeat(program, seen) and len(seen) == 1
        assert find_windows(program, seen) == find_windows(program)


def test_anchored_periods_are_the_shortest_distances_over_which_the_anchored_tasks_repeat():
    import numpy as np

    from scalesim.engine.periods import ANCHOR_TASKS, ANCHORED, anchored_periods

    def by_definition(sig):
        n, out = len(sig), set()
        for anchor in (n // 4, n // 2):
            span = min(ANCHOR_TASKS, n // 8)
            block = sig[anchor:anchor + span]
            out.update([d for d in range(1, n - anchor - span + 1)
                        if np.array_equal(sig[anchor + d:anchor + d + span], block)][:ANCHORED])
        return sorted(out)

    rng = np.random.default_rng(0)
    round_ = rng.integers(0, 3, 97)                 # a long round of few distinct tasks
    for sig in (np.tile(round_, 90), np.tile(np.arange(5), 700), rng.integers(0, 2, 4000)):
        assert anchored_periods(sig) == by_definition(sig)
    assert anchored_periods(np.tile(round_, 90))[0] == 97


def test_the_why_script_names_the_condition_that_refuses_a_step(small_steps):
    # validation/fast_forward_why.py: a long steady pipeline gets a cut that checks periodic; a
    # pipeline of 7 micro-batches has too few periods for any cut, and the fast-forward plays it whole.
    import importlib.util

    spec = importlib.util.spec_from_file_location("fast_forward_why", ROOT / "validation" / "fast_forward_why.py")
    why = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(why)
    long, short = pipeline(200), pipeline(7)
    lines = dict(line.split(maxsplit=1) for line in why.reasons(long, play=True))
    assert lines["plan_cut"].endswith(": cut") and lines["check"].endswith(": periodic")
    assert ff.fast_forward(long, played) is not None
    lines = dict(line.split(maxsplit=1) for line in why.reasons(short, play=True))
    assert lines["plan_cut"].endswith(": no cut") and "fewer than 2 periods" in lines["check"]
    assert ff.fast_forward(short, played) is None
