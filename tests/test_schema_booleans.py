"""YAML reads true/false (and yes/no, on/off) as booleans; where a key takes a number, pydantic
would take them as 1 and 0: `zero: true` ran ZeRO-1 and `micro_batch: yes` ran one sample,
silently. They are refused with the file, the key and what it takes (exit 2)."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("section, key, value, allowed", [
    ("parallel", "zero", True, "0, 1, 2, 3"),
    ("parallel", "tp", True, "number"),
    ("training", "micro_batch", True, "number"),
    ("pricing", "gpu_hour_usd", False, "number"),
])
def test_a_boolean_where_a_number_belongs_is_refused(tmp_path, section, key, value, allowed):
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data.setdefault(section, {})[key] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 2, result.output
    assert str(path) in result.output and f"{section}.{key}" in result.output and allowed in result.output
    assert "Traceback" not in result.output


def test_booleans_stay_booleans_where_a_key_takes_one(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data["parallel"]["overlap_grad_reduce"] = False
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"]).exit_code == 0
