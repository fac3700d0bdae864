"""A scenario's name is the user's text: the tables print it as written, brackets included (rich
would otherwise read "[v2]" or "[test=1]" as markup and drop it)."""

from pathlib import Path

import yaml
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]
NAME = "8x 4090 [v2] DDP [test=1] [bold]"


def _scenario(tmp_path: Path) -> str:
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data["name"] = NAME
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _printed(*args) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_run_table_prints_the_name_as_written(tmp_path):
    assert NAME in _printed("run", _scenario(tmp_path), "--no-plots", "--no-scaling")


def test_compare_table_prints_the_name_as_written(tmp_path):
    out = _printed("compare", _scenario(tmp_path), str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "--no-plots")
    table = out.split("Pareto front")[0]          # the line after the table names the designs too
    for part in ("[v2]", "[test=1]", "[bold]"):
        assert part in table


def test_sweep_table_prints_the_name_as_written(tmp_path):
    out = _printed("sweep", _scenario(tmp_path), "--gpus", "8", "--out", str(tmp_path / "sweep"), "--no-plots")
    assert NAME in out
