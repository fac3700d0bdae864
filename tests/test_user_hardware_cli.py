"""Your own hardware from the command line: inline GPUs, catalog folders, paths relative to the scenario."""

import json
import os

from click.testing import CliRunner

from scalesim.cli import main
from scalesim.hardware import get_gpu

GiB = 2**30
SCENARIO = """\
name: {name}
cluster:
  node: {node}
model: gpt2-124m
training: {{global_batch: 16, micro_batch: 8, seq_len: 1024}}
"""


def invoke(*args, env=None):
    result = CliRunner().invoke(main, list(args), env=env)
    assert "Traceback" not in result.output
    return result


def test_a_scenario_with_an_a100_given_80_gb_runs(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(name="big-a100", node="{gpu: {base: a100-40gb-pcie, memory_gb: 80}, gpus: 2}"))
    result = invoke("run", str(path), "--json", "--no-plots")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["memory_capacity_bytes"] == 80 * GiB


def test_a_node_file_resolves_next_to_the_scenario_from_any_directory(tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "project" / "my-node.yaml").write_text("gpu: l40s\ngpus: 2\n")
    scenario = tmp_path / "project" / "s.yaml"
    scenario.write_text(SCENARIO.format(name="rel", node="./my-node.yaml"))
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = invoke("run", os.path.relpath(scenario), "--json", "--no-plots")
    assert result.exit_code == 0, result.output
    # the L40S of my-node.yaml, at its catalog capacity
    assert json.loads(result.stdout)["memory_capacity_bytes"] == get_gpu("l40s").memory_bytes


def test_a_catalog_folder_shows_in_hardware_with_its_file_and_feeds_run(tmp_path):
    folder = tmp_path / "cat"
    folder.mkdir()
    (folder / "gpus.yaml").write_text("lab-l40s: {base: l40s, memory_gb: 96}\n")
    listing = json.loads(invoke("hardware", "--json", "--catalog", str(folder)).output)
    row = next(g for g in listing["gpus"] if g["name"] == "lab-l40s")
    assert row["file"] == str(folder / "gpus.yaml")
    assert all(g["file"] == "built-in catalog" for g in listing["gpus"] if g["name"] != "lab-l40s")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(name="lab", node="{gpu: lab-l40s, gpus: 2}"))
    assert invoke("run", str(scenario), "--json", "--no-plots").exit_code == 2      # unknown without the folder
    via_env = invoke("run", str(scenario), "--json", "--no-plots", env={"SCALESIM_CATALOG": str(folder)})
    assert via_env.exit_code == 0, via_env.output
    assert json.loads(via_env.stdout)["memory_capacity_bytes"] == 96 * GiB


def test_mistakes_exit_2_naming_the_key(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(name="bad", node="{gpu: {base: a100-40gb-pcie, memory_gbb: 80}, gpus: 2}"))
    result = invoke("run", str(scenario), "--no-plots")
    assert result.exit_code == 2 and "cluster.node.gpu.memory_gbb" in result.output
    missing = invoke("hardware", "--catalog", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "catalog folder not found" in missing.output


def test_sweep_takes_the_catalog_folder_to_every_plan(tmp_path):
    folder = tmp_path / "cat"
    folder.mkdir()
    (folder / "gpus.yaml").write_text("lab-l40s: {base: l40s, memory_gb: 96}\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(name="lab", node="{gpu: lab-l40s, gpus: 2}"))
    result = invoke("sweep", str(scenario), "--gpus", "2", "--catalog", str(folder), "--workers", "1",
                    "--no-plots", "--json", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["best"][0]
    assert best["status"] == "ok" and best["memory_capacity_bytes"] == 96 * GiB
