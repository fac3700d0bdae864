"""Sweeps on executors: every executor finds the same rows in the same order, an interrupted sweep
resumes to the same files, a plan that raises becomes a row with its reason, and Dask is optional."""

import json
import os
import pickle
import sys

import pytest
import yaml
from click.testing import CliRunner

import scalesim.app.sweep as sweep_module
from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.app.executors import ExecutorSpec, completed, open_pool, parse_executor
from scalesim.app.points_file import NAME, PointsFile
from scalesim.scenario import load_scenario
from scalesim.app.plans import PlanPoint, cluster_for

# GPT-2 124M on one DGX H100, searched at 2 and 4 GPUs: 19 simulated plans in about 2 s.
from scalesim.app.sweep import run_sweep

# GPT-2 124M on one DGX H100, searched at 2 and 4 GPUs: 19 simulated plans in about 2 s.
BASE = {"name": "executors gpt2-124m", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "gpt2-124m",
        "training": {"precision": "bf16", "seq_len": 512, "global_batch": 16, "micro_batch": 4, "tokens": 1e8}}
COUNTS = [2, 4]
EVALUATE_POINT = sweep_module.evaluate_point


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("executors") / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


@pytest.fixture(scope="module")
def in_process(scenario_path):
    """The reference: every plan simulated one after the other in this process."""
    scenario, file = load_scenario(scenario_path)
    return run_sweep(scenario, file, COUNTS, search=True)


@pytest.fixture(scope="module")
def dask_address():
    """A 2-worker Dask cluster on loopback (threads: starts in a fraction of a second, and sees this
    process's monkeypatches). Its HTTP port is any free one: None would try 8787, then warn."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster:
        yield "dask://" + cluster.scheduler_address.removeprefix("tcp://")


def sweep_cli(*args):
    return CliRunner().invoke(main, ["sweep", *map(str, args), "--no-plots"])


SEARCH = ["--gpus", "2,4", "--search", "--workers", "1", "--out"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory, scenario_path):
    """The files of the search run in one go, in this process."""
    out = tmp_path_factory.mktemp("whole")
    assert sweep_cli(scenario_path, *SEARCH, out).exit_code == 0
    return out


def test_the_reference_sweep_simulates_enough_plans_to_tell_orders_apart(in_process):
    # some simulated, some skipped by the step-time bound (parallel/bounds.py): executors must agree on both
    assert sum(r["status"] == "ok" for r in in_process["rows"]) >= 5
    assert any("parallel/bounds.py" in (r["reason"] or "") for r in in_process["rows"])


def test_a_local_process_pool_finds_the_same_rows_in_the_same_order(scenario_path, in_process):
    scenario, file = load_scenario(scenario_path)
    pooled = run_sweep(scenario, file, COUNTS, search=True, executor=ExecutorSpec("local", 2))
    assert pooled == in_process


def test_a_dask_cluster_finds_the_same_rows_in_the_same_order(scenario_path, in_process, dask_address):
    scenario, file = load_scenario(scenario_path)
    on_dask = run_sweep(scenario, file, COUNTS, search=True, executor=parse_executor(dask_address))
    assert on_dask == in_process


def test_the_files_are_identical_whichever_executor_wrote_them(tmp_path, scenario_path, dask_address, whole):
    result = sweep_cli(scenario_path, *SEARCH, tmp_path, "--executor", dask_address)
    assert result.exit_code == 0, result.output
    for name in ("sweep.csv", "sweep.json"):
        assert (tmp_path / name).read_bytes() == (whole / name).read_bytes()


def test_a_dask_local_cluster_started_for_the_run_gives_the_same_files(tmp_path, scenario_path):
    pytest.importorskip("distributed")
    for name, executor in (("one", ["--workers", "1"]), ("dask", ["--executor", "dask-local", "--workers", "2"])):
        result = sweep_cli(scenario_path, "--gpus", "2,4", "--out", tmp_path / name, *executor)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "one" / "sweep.json").read_bytes() == (tmp_path / "dask" / "sweep.json").read_bytes()


def test_the_worker_payload_pickles_small_and_unchanged(scenario_path):
    scenario, file = load_scenario(scenario_path)
    grown, _ = cluster_for(scenario, 4, file)
    payload = (PlanPoint(gpus=4, dp=2, tp=2, micro_batch=2, recompute="selective"), scenario, file, grown)
    data = pickle.dumps(payload)
    assert pickle.loads(data) == payload and len(data) < 8_000


def interrupt_after(monkeypatch, simulations: int) -> list:
    """Make the in-process sweep raise Ctrl-C once `simulations` plans are done; returns the log of plans run."""
    done = []

    def evaluate_then_stop(point, *args):
        if len(done) == simulations:
            raise KeyboardInterrupt
        done.append(point)
        return EVALUATE_POINT(point, *args)
    monkeypatch.setattr(sweep_module, "evaluate_point", evaluate_then_stop)
    return done


def test_an_interrupted_sweep_resumed_writes_the_same_files_as_an_uninterrupted_one(tmp_path, scenario_path,
                                                                                      monkeypatch, whole):
    simulated = sum(1 for _ in (whole / NAME).open())
    interrupt_after(monkeypatch, 3)
    stopped = sweep_cli(scenario_path, *SEARCH, tmp_path)
    assert stopped.exit_code == 130 and "--resume" in stopped.stderr
    assert sum(1 for _ in (tmp_path / NAME).open()) == 3
    assert not (tmp_path / "sweep.json").exists()

    ran = interrupt_after(monkeypatch, 1000)
    resumed = sweep_cli(scenario_path, *SEARCH, tmp_path, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert len(ran) == simulated - 3                   # the 3 finished plans were not simulated again
    for name in ("sweep.csv", "sweep.json"):
        assert (tmp_path / name).read_bytes() == (whole / name).read_bytes()


def test_a_line_cut_short_by_the_interruption_is_simulated_again(tmp_path, scenario_path, whole):
    lines = (whole / NAME).read_text().splitlines(keepends=True)
    (tmp_path / NAME).write_text("".join(lines[:2]) + lines[2][:40])
    assert sweep_cli(scenario_path, *SEARCH, tmp_path, "--resume").exit_code == 0
    assert (tmp_path / "sweep.json").read_bytes() == (whole / "sweep.json").read_bytes()
    assert all(json.loads(line) for line in (tmp_path / NAME).read_text().splitlines()[3:])


def test_an_earlier_points_file_is_never_overwritten_silently(tmp_path, scenario_path):
    args = [scenario_path, "--gpus", "2", "--workers", "1", "--out", tmp_path]
    assert sweep_cli(*args).exit_code == 0
    before = (tmp_path / NAME).read_bytes()
    again = sweep_cli(*args)
    assert again.exit_code == 2 and "--resume" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.output and (tmp_path / NAME).read_bytes() == before
    assert sweep_cli(*args, "--resume", "--force").exit_code == 2
    assert sweep_cli(*args, "--force").exit_code == 0
    assert (tmp_path / NAME).read_bytes() == before        # started over: the same one plan, once


@pytest.mark.parametrize("resume", [[], ["--resume"]])
def test_a_points_file_the_user_wrote_is_never_appended_to(tmp_path, scenario_path, resume):
    """fuzz15: a points.jsonl without a sweep's rows (the user's notes) was appended to at exit 0."""
    (tmp_path / NAME).write_text("my notes\n")
    args = [scenario_path, "--gpus", "2", "--workers", "1", "--out", tmp_path]
    result = sweep_cli(*args, *resume)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert str(tmp_path / NAME) in result.stderr and "--force" in result.stderr
    assert (tmp_path / NAME).read_text() == "my notes\n"
    assert sweep_cli(*args, "--force").exit_code == 0       # asked: discarded
    assert (tmp_path / NAME).read_text().startswith('{"scenario_file": ')


def test_resume_never_reuses_the_rows_of_an_edited_scenario(tmp_path, scenario_path, monkeypatch):
    args = ["--gpus", "2", "--workers", "1", "--out", tmp_path]
    assert sweep_cli(scenario_path, *args).exit_code == 0
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump({**BASE, "training": {**BASE["training"], "seq_len": 1024}}))
    ran = interrupt_after(monkeypatch, 1000)
    assert sweep_cli(edited, *args, "--resume").exit_code == 0
    assert len(ran) == 1


def raise_for_tp2(monkeypatch):
    """Make every simulation of a plan with tp = 2 raise, as a bug would."""
    run = sweep_module.run

    def run_or_fail(scenario, *args, **kwargs):
        if scenario.parallel.tp == 2:
            raise RuntimeError("boom")
        return run(scenario, *args, **kwargs)
    monkeypatch.setattr(sweep_module, "run", run_or_fail)


@pytest.mark.parametrize("where", ["in_process", "dask"])
def test_a_plan_that_raises_becomes_a_failed_row_and_the_others_still_run(where, scenario_path, monkeypatch,
                                                                          request):
    raise_for_tp2(monkeypatch)
    scenario, file = load_scenario(scenario_path)
    executor = parse_executor(request.getfixturevalue("dask_address")) if where == "dask" else ExecutorSpec("local", 1)
    result = run_sweep(scenario, file, [4], search=True, exhaustive=True, executor=executor)  # every plan tried
    failed = [r for r in result["rows"] if r["status"] == "failed"]
    assert len(failed) >= 2 and all(r["tp"] == 2 for r in failed)
    assert failed[0]["reason"].startswith("RuntimeError: boom (at test_sweep_executors.py:")
    assert result["summary"][4]["failed"] == len(failed)
    assert result["best"][0]["status"] == "ok" and result["best"][0]["tp"] != 2


def test_a_failed_plan_is_retried_on_resume(tmp_path, scenario_path, monkeypatch):
    args = [scenario_path, "--gpus", "4", "--search", "--workers", "1", "--out", tmp_path]
    raise_for_tp2(monkeypatch)
    assert sweep_cli(*args).exit_code == 0
    monkeypatch.undo()
    ran = interrupt_after(monkeypatch, 1000)
    assert sweep_cli(*args, "--resume").exit_code == 0
    assert ran and all(p.tp == 2 for p in ran)
    assert "failed" not in {r["status"] for r in json.loads((tmp_path / "sweep.json").read_text())["rows"]}


def test_a_task_lost_with_its_worker_comes_back_as_an_error_not_a_crash():
    with open_pool(ExecutorSpec("local", 2)) as pool:
        results = dict(completed(pool, os._exit, [(3,)] * 9))      # more than the pool takes at once
    assert len(results) == 9 and all(isinstance(r, Exception) for r in results.values())


def test_completed_maps_every_payload_once():
    with open_pool(ExecutorSpec("local", 1)) as pool:
        results = sorted(completed(pool, pow, [(2, k) for k in range(5)]))
    assert results == [(k, 2 ** k) for k in range(5)]


def test_asking_for_dask_without_it_installed_exits_2_saying_what_to_install(scenario_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)          # import distributed -> ImportError
    for executor in ("dask-local", "dask://127.0.0.1:8786"):
        result = sweep_cli(scenario_path, "--gpus", "2", "--executor", executor)
        assert result.exit_code == 2 and "pip install 'scalesim[dask]'" in result.stderr, result.output
        assert "Traceback" not in result.output


def test_executor_names_are_checked():
    assert parse_executor("local", 3) == ExecutorSpec("local", 3)
    assert parse_executor("local").workers == os.cpu_count()
    for bad in ("dask", "dask://host", "dask://host:99999", "ray://host:1", "Local"):
        with pytest.raises(InputError, match="allowed: local, dask-local, dask://HOST:PORT"):
            parse_executor(bad)


def test_json_on_stdout_stays_clean_json(tmp_path, scenario_path):
    result = sweep_cli(scenario_path, "--gpus", "2", "--workers", "1", "--json", "--out", tmp_path)
    assert result.exit_code == 0 and json.loads(result.stdout)["rows"]


def test_the_points_file_holds_one_line_per_simulated_plan_with_its_key(tmp_path, scenario_path):
    scenario, file = load_scenario(scenario_path)
    with PointsFile(tmp_path / NAME, scenario, file) as points:
        result = run_sweep(scenario, file, [2], search=True, points_file=points)
    lines = [json.loads(line) for line in (tmp_path / NAME).read_text().splitlines()]
    simulated = [r for r in result["rows"] if r["status"] == "ok"]
    assert len(lines) == len(simulated)
    assert {line["scenario_sha256"] for line in lines} == {points.digest}
    assert sorted(line["plan"] for line in lines) == sorted(r["plan"] for r in simulated)
