"""Whole commands stay bounded: run's scaling points and a sweep's plans are charged to the
command's answer budget (scalesim/limits.py), left out with the reason or refused naming the option;
a million GPUs is refused by every command with the reason, at once."""

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import scalesim.limits as limits
from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "scenarios" / "8x4090-ddp.yaml"


def tight_budget(monkeypatch, tasks_per_second: float) -> None:
    """As if the machine simulated only `tasks_per_second` estimated tasks per second: the same
    budgets in seconds hold ten times fewer tasks, so a small scenario reaches them."""
    monkeypatch.setattr(limits, "TASKS_PER_SECOND", tasks_per_second)


def test_scaling_points_beyond_the_budget_are_left_out_with_the_reason(monkeypatch):
    # The library has no answer budget: every point is simulated. Under a budget that the step and
    # its baseline nearly fill, the points that no longer fit are listed instead, each with why.
    from scalesim.app.run import run_setup
    from scalesim.app.setup import prepare
    from scalesim.parallel.size import step_cost
    from scalesim.scenario import load_scenario

    s, file = load_scenario(DDP)
    counts = [1, 2, 4, 8]
    free = run_setup(prepare(s, file), scaling_counts=counts)
    assert [p["gpus"] for p in free.scaling] == counts and not free.scaling_skipped
    assert "scaling_skipped" not in free.to_json()               # only when something was left out

    setup = prepare(s, file)
    with limits.answer_budget():
        limits.charge(limits.ANSWER_SECONDS * limits.TASKS_PER_SECOND - 1.5 * step_cost(setup.step))
        result = run_setup(setup, scaling_counts=counts)
    simulated = {p["gpus"] for p in result.scaling}
    skipped = {p["gpus"]: p for p in result.scaling_skipped}
    assert {1, 8} <= simulated and skipped and simulated.isdisjoint(skipped)
    assert simulated | set(skipped) == set(counts)
    for point in skipped.values():
        assert point["reason"].startswith("over the answer budget (") and "--max-seconds" in point["reason"]
        assert point["estimated_tasks"] > 0
    assert result.scaling_efficiency == free.scaling_efficiency   # the baseline is never left out
    assert result.to_json()["scaling_skipped"] == result.scaling_skipped


def test_run_shows_the_points_it_left_out_and_max_seconds_brings_them_back(monkeypatch, tmp_path):
    tight_budget(monkeypatch, 200)          # 2,000 tasks in 10 s: the 8-GPU step fits, not its whole curve
    out = tmp_path / "plots"
    table = CliRunner().invoke(main, ["run", str(DDP), "--out", str(out)])
    assert table.exit_code == 0, table.output
    assert "(scaling point)" in table.output and "not simulated: over the answer budget" in table.output
    left_out = {int(line.split("GPU")[0].strip(" │").replace(",", "")) for line in table.output.splitlines()
                if "(scaling point)" in line}
    allowed = json.loads(CliRunner().invoke(main, ["run", str(DDP), "--out", str(out), "--json",
                                                   "--max-seconds", "1000"]).output)
    assert "scaling_skipped" not in allowed
    assert left_out <= {p["gpus"] for p in allowed["scaling"]}


def test_a_sweep_over_its_budget_is_refused_naming_gpus_unless_max_seconds_allows_it(monkeypatch, tmp_path):
    tight_budget(monkeypatch, 10)           # 1,200 tasks in a sweep's 120 s: not four 8x4090 plans
    args = ["sweep", str(DDP), "--gpus", "1,2,4,8", "--workers", "1", "--no-plots", "--out", str(tmp_path)]
    start = time.process_time()
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "'--gpus'" in refused.output and "answer budget" in refused.output and "--max-seconds" in refused.output
    assert time.process_time() - start < 5, "refused before simulating"
    done = CliRunner().invoke(main, [*args, "--force", "--max-seconds", "100000"])
    assert done.exit_code == 0, done.output


def test_a_search_simulates_the_lowest_bounds_while_its_budget_lasts_and_lists_the_rest(monkeypatch):
    from scalesim.app.sweep import run_sweep
    from scalesim.scenario import load_scenario

    s, file = load_scenario(DDP)
    tight_budget(monkeypatch, 200)          # 24,000 tasks in 120 s: a few of the 8-GPU plans
    with limits.answer_budget(default_seconds=limits.SWEEP_SECONDS):
        sweep = run_sweep(s, file, [8], search=True)
        spent = limits._LEDGER.get().spent
        assert spent <= limits._LEDGER.get().limit
    over = [r for r in sweep["rows"] if "estimated_tasks" in r]
    simulated = [r for r in sweep["rows"] if r["step_time_s"] is not None]
    assert over and simulated
    assert all(r["status"] == "not_available" and r["reason"].startswith("over the answer budget") for r in over)
    assert any("plans not simulated" in n for n in sweep["notes"])


def test_checking_too_many_plans_is_refused_naming_search(monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "PLAN_CHECK_SECONDS", 1.0)     # as if each check took a second
    result = CliRunner().invoke(main, ["sweep", str(DDP), "--gpus", "8", "--search", "--workers", "1",
                                       "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "'--search'" in result.output and "checking the memory of" in result.output


def test_compare_search_gets_a_sweeps_budget_and_its_run_a_runs():
    with limits.answer_budget():
        with limits.fresh_budget(limits.SWEEP_SECONDS):
            assert limits._LEDGER.get().seconds == limits.SWEEP_SECONDS
        with limits.fresh_budget():
            assert limits._LEDGER.get().seconds == limits.ANSWER_SECONDS
    with limits.no_budget():
        assert limits._LEDGER.get() is None


# ---------------------------------------------------------------- a million GPUs of one design

def _million(tmp_path, source: str, **cluster) -> str:
    data = yaml.safe_load((ROOT / "scenarios" / source).read_text())
    data["cluster"].update(cluster)
    path = tmp_path / "million.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("command", [
    lambda t: ["run", _million(t, "16384xh100-llama3-405b.yaml", nodes=125_000), "--no-plots"],
    lambda t: ["run", _million(t, "16384xh100-llama3-405b.yaml", gpus=1_000_000), "--no-plots"],
    lambda t: ["compare", _million(t, "16384xh100-llama3-405b.yaml", nodes=125_000), "--no-plots"],
    lambda t: ["sweep", str(ROOT / "scenarios" / "64xh100-llama3-70b.yaml"), "--gpus", "1000000", "--search",
               "--no-plots", "--out", str(t / "sweep")],
    lambda t: ["collective", "--topology", "dgx-h100", "--nodes", "125000", "--fabric", "ib-ndr"],
    lambda t: ["serve", _million(t, "serve-8xh100-llama3-70b.yaml", nodes=125_000,
                                 fabric={"link": "ib-ndr", "nics_per_node": 8}), "--no-plots"],
])
def test_a_million_gpus_is_refused_at_once_by_every_command_with_the_reason(command, tmp_path):
    start = time.process_time()
    result = CliRunner().invoke(main, command(tmp_path))
    assert time.process_time() - start < 5
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "above the limit of" in result.output and "graph" in result.output      # the reason
    assert "--gpus" in result.output if command(tmp_path)[0] == "sweep" else "nodes" in result.output \
        or "gpus" in result.output


def test_costs_beyond_a_trillion_dollars_are_shown_as_powers_of_ten():
    from scalesim.units import format_usd

    assert format_usd(2.5e12) == "$2.50e+12" and format_usd(3e15) == "$3.00e+15"
    assert format_usd(999_999_999_999) == "$999,999,999,999"       # whole dollars up to a trillion


def test_a_piped_sweep_says_how_far_it_is_on_stderr(monkeypatch, tmp_path):
    # No terminal (CliRunner, a pipe, a CI log): a line "simulating plans: k of n (t s elapsed)" on
    # stderr every interval (10 s; here 1 ms), also with --json, whose stdout stays one JSON document.
    import functools

    import scalesim.cli.progress_bars as bars
    from scalesim.app.heartbeat import lines

    monkeypatch.setattr(bars, "heartbeat_lines", functools.partial(lines, interval=0.001))
    result = CliRunner().invoke(main, ["sweep", str(DDP), "--gpus", "4,8", "--workers", "1", "--json",
                                       "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert " of 2 (" in result.stderr and "elapsed)" in result.stderr
    assert json.loads(result.stdout)["gpu_counts"] == [4, 8]
