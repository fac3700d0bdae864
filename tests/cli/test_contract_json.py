"""`--json` answers are JSON: a number that came out infinite or undefined (an overflow the input checks
let through) is an input error naming where it sits, exit 2, never `Infinity` or `NaN` on stdout (fuzz15:
a GPU of 1e-300 TFLOP/s printed "energy_kwh": Infinity)."""

import json

from click.testing import CliRunner

from scalesim.cli import main
from scalesim.result import StepResult


def test_an_infinite_number_in_run_json_exits_2_naming_its_field(monkeypatch):
    to_json = StepResult.to_json
    monkeypatch.setattr(StepResult, "to_json", lambda self: {**to_json(self), "energy_kwh": float("inf")})
    result = CliRunner().invoke(main, ["run", "scenarios/8x4090-ddp.yaml", "--json", "--no-plots", "--no-scaling"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "energy_kwh" in result.stderr and "Infinity" not in result.stdout


def test_finite_answers_print_as_before():
    result = CliRunner().invoke(main, ["run", "scenarios/8x4090-ddp.yaml", "--json", "--no-plots", "--no-scaling"])
    assert result.exit_code == 0 and json.loads(result.stdout)["step_time_s"] > 0
