"""`scalesim hardware NAME --json` prints NAME's entry, as `hardware NAME` shows it (it printed
the whole catalog); an unknown NAME is refused with the closest one, as without --json."""

import json

from click.testing import CliRunner

from scalesim.cli import main


def test_hardware_name_json_holds_only_that_entry():
    result = CliRunner().invoke(main, ["hardware", "rtx4090", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert [g["name"] for g in data["gpus"]] == ["rtx4090"] and data["links"] == []
    link = json.loads(CliRunner().invoke(main, ["hardware", "nvlink4", "--json"]).output)
    assert link["gpus"] == [] and [x["name"] for x in link["links"]] == ["nvlink4"]


def test_an_unknown_name_is_refused_with_json_too():
    result = CliRunner().invoke(main, ["hardware", "rtx4900", "--json"])
    assert result.exit_code == 2 and "rtx4090" in result.output
