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


def test_hardware_name_shows_each_figure_in_its_unit():
    """`hardware h100-sxm` printed 9.894e+14 and 85899345920.0; a buyer reads TFLOP/s, GiB, GB/s."""
    import re

    gpu = CliRunner().invoke(main, ["hardware", "h100-sxm"], terminal_width=200).output
    link = CliRunner().invoke(main, ["hardware", "nvlink4"], terminal_width=200).output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in (gpu + link).splitlines()
            if line.count("│") == 3 and line.split("│")[1].strip()}
    assert rows["bf16_flop_per_s"] == "989.4 TFLOP/s" and rows["memory_bytes"] == "80.0 GiB"
    assert rows["memory_bw_bytes_per_s"] == "3,350.0 GB/s" and rows["tdp_w"] == "700 W"
    assert rows["bw_bytes_per_s"] == "450.0 GB/s per direction" and rows["latency_s"] == "0.2 us"
    assert not [v for v in rows.values() if re.search(r"\de[+-]\d", v)], rows
