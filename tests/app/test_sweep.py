"""scalesim sweep: cluster growth, plan search, never a best plan that does not fit."""

import csv
import json

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.scenario import load_scenario
from scalesim.app.plans import PlanPoint, cluster_for
from scalesim.app.sweep import evaluate_point, parse_counts, run_sweep

BASE = {"name": "sweep gpt2-124m", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "gpt2-124m",
        "training": {"precision": "bf16", "seq_len": 512, "global_batch": 16, "micro_batch": 4, "tokens": 1e8}}


def write(tmp_path, data, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    scenario, file = write(tmp_path_factory.mktemp("sweep"), BASE)
    return run_sweep(scenario, file, [1, 2, 4], search=True)


def test_the_best_plan_always_fits_and_is_simulated(searched):
    for best in searched["best"]:
        assert best["status"] == "ok", best
        assert best["memory_per_gpu_bytes"] <= best["memory_capacity_bytes"]
        assert best["step_time_s"] > 0


def test_the_best_plan_is_the_fastest_simulated_one(searched):
    for best in searched["best"]:
        rivals = [r for r in searched["rows"] if r["gpus"] == best["gpus"] and r["status"] == "ok"]
        assert best["time_to_train_s"] == min(r["time_to_train_s"] for r in rivals)


def test_no_row_marked_ok_exceeds_memory_and_every_other_row_says_why(searched):
    for row in searched["rows"]:
        if row["status"] == "ok":
            assert row["memory_per_gpu_bytes"] <= row["memory_capacity_bytes"]
        else:
            assert row["reason"]


def test_the_search_splits_the_gpus_exactly(searched):
    for row in searched["rows"]:
        if row["status"] != "not_available" or row["dp"]:
            assert row["dp"] * row["tp"] * row["pp"] * row["cp"] == row["gpus"]


def test_a_plan_too_big_for_memory_is_never_best(tmp_path):
    big = {**BASE, "model": "gpt2-1.5b", "cluster": {"node": "rtx4090-pcie-8", "gpus": 1},
           "training": {**BASE["training"], "micro_batch": 16}}
    scenario, file = write(tmp_path, big)
    sweep = run_sweep(scenario, file, [1])                # the scenario's own plan only
    assert sweep["best"][0]["status"] == "none"
    assert sweep["rows"][0]["status"] == "does_not_fit"


def test_evaluation_maps_one_point_to_one_row_deterministically(tmp_path):
    scenario, file = write(tmp_path, BASE)
    point = PlanPoint(gpus=2, dp=2, micro_batch=4)
    a, b = evaluate_point(point, scenario, file), evaluate_point(point, scenario, file)
    assert a == b and a["status"] == "ok" and a["plan"] == point.label


def test_a_plan_the_simulator_refuses_is_not_available_with_its_reason(tmp_path):
    scenario, file = write(tmp_path, BASE)
    row = evaluate_point(PlanPoint(gpus=2, dp=1, tp=2, micro_batch=4, recompute="none", zero=0, pp=1, cp=3),
                         scenario, file)
    assert row["status"] == "not_available" and row["reason"]


def test_the_cluster_grows_by_whole_nodes_with_the_design_nics_as_default_fabric(tmp_path):
    scenario, file = write(tmp_path, BASE)
    grown, notes = cluster_for(scenario, 20, file)
    assert grown.cluster.nodes == 3 and grown.cluster.gpus == 20        # ceil(20 / 8)
    assert grown.cluster.fabric.link == "ib-ndr" and grown.cluster.fabric.nics_per_node == 8
    assert notes and "cluster.fabric" in notes[0]
    same, notes = cluster_for(scenario, 8, file)
    assert same.cluster.nodes == 1 and not notes


def test_a_design_without_nics_needs_a_fabric(tmp_path):
    from scalesim.topology import load_node_design
    design = load_node_design("dgx-h100").model_dump()
    design["nics"] = {"count": 0}
    scenario, file = write(tmp_path, {**BASE, "cluster": {"node": design, "gpus": 8}})
    with pytest.raises(InputError, match="cluster.fabric"):
        cluster_for(scenario, 16, file)


def test_gpu_counts_are_checked():
    assert parse_counts("8, 16,8,32") == [8, 16, 32]
    with pytest.raises(InputError):
        parse_counts("8,x")


def test_cli_writes_csv_json_and_plot(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["sweep", str(path), "--gpus", "1,2", "--rank", "cost", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    data = json.loads((out / "sweep.json").read_text())
    assert len(rows) == len(data["rows"]) == 2 and data["rank_by"] == "cost"
    assert (out / "best.png").stat().st_size > 10_000


def test_splits_an_interleaved_schedule_cannot_fill_run_1f1b_instead_of_being_dropped(tmp_path):
    interleaved = {**BASE, "parallel": {"tp": 2, "pp": 2, "pp_schedule": "interleaved", "virtual_stages": 2}}
    scenario, file = write(tmp_path, interleaved)
    sweep = run_sweep(scenario, file, [2], search=True)
    assert not [r for r in sweep["rows"] if "interleaved" in (r["reason"] or "")]
    assert any(r["pp"] == 1 and r["status"] == "ok" for r in sweep["rows"])
    assert any("1F1B" in note for note in sweep["notes"])


def test_when_nothing_fits_the_sweep_says_how_much_memory_the_smallest_plan_needs(tmp_path):
    big = {**BASE, "model": "llama3-405b", "cluster": {"node": "rtx4090-pcie-8", "gpus": 1}}   # not even offloaded
    scenario, file = write(tmp_path, big)
    (best,) = run_sweep(scenario, file, [1], search=True)["best"]
    assert best["status"] == "none"
    assert "smallest needs" in best["reason"] and "24.0 GiB" in best["reason"]


def test_memory_headroom_keeps_the_chosen_plans_clear_of_the_capacity_and_never_speeds_them_up(tmp_path):
    times = []
    for headroom in (0.0, 0.5):
        data = {**BASE, "cluster": {"node": "rtx4090-pcie-8", "gpus": 1}, "model": "gpt2-350m",
                "training": {**BASE["training"], "memory_headroom": headroom}}
        scenario, file = write(tmp_path, data, f"h{headroom}.yaml")
        sweep = run_sweep(scenario, file, [1], search=True)
        for r in sweep["rows"]:
            if r["status"] == "ok":
                assert r["memory_per_gpu_bytes"] * (1 + headroom) <= r["memory_capacity_bytes"]
        times.append(sweep["best"][0]["step_time_s"])
    assert times[1] >= times[0]


def test_sweep_exits_3_when_no_gpu_count_has_a_plan_that_fits(tmp_path):
    big = {**BASE, "model": "llama3-405b", "cluster": {"node": "rtx4090-pcie-8", "gpus": 1}}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    result = CliRunner().invoke(main, ["sweep", str(path), "--gpus", "1", "--search", "--no-plots", "--workers", "1",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output



def test_a_gpu_count_with_no_plan_still_says_how_many_nodes_it_takes(tmp_path):
    # The table's nodes column was blank for a GPU count whose plans all ran out of memory.
    big = {**BASE, "model": "llama3-405b", "cluster": {"node": "rtx4090-pcie-8", "gpus": 8}}
    scenario, file = write(tmp_path, big)
    sweep = run_sweep(scenario, file, [8, 24])             # 8 GPUs per node
    assert [(b["status"], b["nodes"]) for b in sweep["best"]] == [("none", 1), ("none", 3)]
