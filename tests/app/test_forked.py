"""Work in a forked child (app/forked.py), and run's scaling curve played there beside the step."""

import os
from dataclasses import asdict
from pathlib import Path

import pytest

from scalesim.app.forked import Fed, Forked
from scalesim.app.run import run_setup
from scalesim.app.scaling_curve import scaling_counts
from scalesim.app.setup import prepare
from scalesim.errors import InputError
from scalesim.limits import answer_budget
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
forks = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


@forks
def test_the_work_runs_in_another_process_and_its_result_comes_back():
    with Forked(os.getpid) as child:
        assert child.result() != os.getpid()


@forks
def test_what_the_child_raised_is_raised_here():
    def refuse():
        raise InputError("no", key="parallel.tp")

    with Forked(refuse) as child, pytest.raises(InputError) as caught:
        child.result()
    assert caught.value.key == "parallel.tp"


@forks
def test_an_answer_that_cannot_come_back_is_computed_here():
    with Forked(lambda: (os.getpid(), lambda: None)) as child:      # a lambda does not pickle
        pid, _ = child.result()
    assert pid == os.getpid()


@forks
def test_a_child_whose_result_nobody_asks_for_is_stopped_and_reaped():
    import time

    child = Forked(lambda: time.sleep(60))
    pid = child._pid
    child.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)              # gone: already reaped


def _echo(receive) -> tuple:
    """What a fed child does with its messages: who it is, and what it got, in order."""
    first = receive()
    return os.getpid(), [first, receive()]


@forks
def test_a_fed_child_gets_ready_first_then_receives_what_is_sent_here_in_order():
    ready = []
    with Fed(_echo, prepare=lambda: ready.append(os.getpid())) as child:
        child.send({"a": 1})
        child.send([2.5] * 100_000)                  # more than a pipe holds: the child reads as it goes
        pid, got = child.result()
    assert pid != os.getpid() and got == [{"a": 1}, [2.5] * 100_000]
    assert ready == []                               # prepared there, not here


def test_without_a_fork_a_fed_child_is_the_same_work_done_here():
    with Fed(_echo, fork=False) as child:
        child.send("step")
        child.send("curve")
        assert child.result() == (os.getpid(), ["step", "curve"])


@forks
def test_when_the_fed_child_dies_its_work_is_done_here_with_the_same_messages():
    parent = os.getpid()

    def dies_there(receive):
        if os.getpid() != parent:
            os._exit(1)
        return _echo(receive)

    with Fed(dies_there) as child:
        child.send("step")
        child.send("curve")
        assert child.result() == (parent, ["step", "curve"])


@forks
def test_runs_plots_drawn_by_a_fed_child_are_the_ones_drawn_here(tmp_path):
    from scalesim.cli.training_commands import _plotter, _scaling_message, _timeline_message

    scenario, file = load_scenario(ROOT / "scenarios/8x4090-ddp.yaml")
    result = run_setup(prepare(scenario, file), scaling_counts=[1, 2, 8])
    drawn = {}
    for fork in (True, False):
        with _plotter(scenario.name, tmp_path / str(fork), fork) as plotter:
            plotter.send(_timeline_message(result.timeline))
            plotter.send(_scaling_message(result))
            drawn[fork] = [p.read_bytes() for p in plotter.result()]
    assert len(drawn[True]) == 2 and drawn[True] == drawn[False]


def _result(setup, forked: bool) -> dict:
    data = asdict(run_setup(setup, scaling_counts=scaling_counts(setup.gpus), forked=forked))
    data.pop("timeline")
    return data


@pytest.mark.parametrize("name", ["scenarios/8x4090-ddp.yaml", "scenarios/8xa100-ddp.yaml"])
def test_the_scaling_curve_played_in_a_child_is_the_one_played_here(name, monkeypatch):
    scenario, file = load_scenario(ROOT / name)
    setup = prepare(scenario, file)
    here = _result(setup, forked=False)
    played = []
    monkeypatch.setattr("scalesim.app.run.Forked", lambda work, here: played.append(work) or Forked(work, here))
    assert _result(setup, forked=True) == here
    assert played                                # it did go through the child
    assert here["scaling"] and here["scaling_efficiency"] is not None


def test_the_answer_budget_leaves_out_the_same_points_in_the_child(monkeypatch):
    scenario, file = load_scenario(ROOT / "scenarios/8x4090-ddp.yaml")
    setup = prepare(scenario, file)
    # a budget just above the step and its baseline: the curve's other points are left out
    monkeypatch.setattr("scalesim.limits.TASKS_PER_SECOND", 2_000)
    with answer_budget(1.0):
        here = _result(setup, forked=False)
    with answer_budget(1.0):
        there = _result(setup, forked=True)
    assert there == here
    monkeypatch.setattr(os, "fork", lambda: (_ for _ in ()).throw(OSError("no more processes")))
    with answer_budget(1.0):
        assert _result(setup, forked=True) == here          # played here after all: charged once
    assert here["scaling_skipped"] and here["scaling"]      # some points left out, the baseline kept


def test_the_step_is_handed_over_before_the_scaling_curve_is_played(monkeypatch):
    import scalesim.app.run as run_module

    scenario, file = load_scenario(ROOT / "scenarios/8x4090-ddp.yaml")
    setup = prepare(scenario, file)
    order, curve = [], run_module._scaling_rates
    monkeypatch.setattr(run_module, "_scaling_rates", lambda *a: order.append("curve") or curve(*a))
    result = run_setup(setup, scaling_counts=[1, 2, 8], on_step=lambda timeline, cols: order.append(timeline))
    assert order[1:] == ["curve"] and order[0].end_s == result.step_time_s


def test_without_a_fork_the_curve_is_played_here_and_the_step_charged_once(monkeypatch):
    from scalesim import limits

    scenario, file = load_scenario(ROOT / "scenarios/8x4090-ddp.yaml")
    setup = prepare(scenario, file)
    with answer_budget(100.0):
        here = _result(setup, forked=False)
        spent = limits._LEDGER.get().spent
    monkeypatch.setattr(os, "fork", lambda: (_ for _ in ()).throw(OSError("no more processes")))
    with answer_budget(100.0):
        assert _result(setup, forked=True) == here
        assert limits._LEDGER.get().spent == spent


def test_a_spare_cpu_is_one_the_load_leaves_free(monkeypatch):
    from scalesim.app.forked import spare_cpu

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.6, 1.0, 1.0))
    assert spare_cpu()
    monkeypatch.setattr(os, "getloadavg", lambda: (5.2, 4.0, 3.0))      # busy: the two would share a CPU
    assert not spare_cpu()
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not spare_cpu()


def test_the_run_command_prints_and_draws_the_same_with_or_without_forks(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from scalesim.cli import main

    monkeypatch.chdir(ROOT)
    outputs = {}
    for fork in (True, False):
        monkeypatch.setattr("scalesim.cli.training_commands.spare_cpu", lambda: fork)
        out = tmp_path / str(fork)
        done = CliRunner().invoke(main, ["run", "scenarios/8x4090-ddp.yaml", "--json", "--out", str(out)])
        assert done.exit_code == 0, done.output
        outputs[fork] = (done.output, (out / "timeline.png").read_bytes(), (out / "scaling.png").read_bytes())
    assert outputs[True] == outputs[False]
