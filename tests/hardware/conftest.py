"""Shared by the hardware tests: run a scenario through the CLI as a user would."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main


@pytest.fixture
def run_json(tmp_path):
    """`run_json(scenario)`: `scalesim run --json` of the scenario dict; a plan that does not fit (exit 3) is
    still a result."""
    def run(scenario: dict) -> dict:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(scenario))
        result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling", "--json"])
        assert result.exit_code in (0, 3), result.output
        return yaml.safe_load(result.output)
    return run
