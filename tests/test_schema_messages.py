"""Messages for a section of the wrong shape speak YAML (a mapping of keys, a list, a number), not
Python or pydantic (`dict`, `NoneType`, `instance of TrainingSpec`)."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[1]
JARGON = ("instance of", "Spec", "NoneType", "dictionary")


@pytest.mark.parametrize("value", [5, None, [1, 2], "fast"])
def test_a_section_that_is_not_a_mapping_names_its_keys(tmp_path, value):
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data["training"] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2
    assert "'training'" in result.output and "mapping" in result.output and "global_batch" in result.output
    assert not any(word in result.output for word in JARGON), result.output


def test_an_empty_node_design_file_says_it_is_empty(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text("# nothing yet\n")
    result = CliRunner().invoke(main, ["collective", "--topology", str(path), "--sizes", "1M"])
    assert result.exit_code == 2
    assert str(path) in result.output and "empty" in result.output
    assert not any(word in result.output for word in JARGON), result.output


@pytest.mark.parametrize("section", ["parallel", "pricing", "reliability", "uncertainty"])
def test_an_optional_section_with_all_its_keys_commented_out_takes_its_defaults(tmp_path, section):
    # `parallel:` with nothing under it is YAML null: it was refused ("expected a mapping, got nothing")
    from scalesim.scenario import load_scenario

    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data.pop(section, None)
    left_out = tmp_path / "left_out.yaml"
    left_out.write_text(yaml.safe_dump(data))
    commented = tmp_path / "commented.yaml"
    commented.write_text(yaml.safe_dump(data) + f"{section}:\n  # every key commented out\n")
    assert load_scenario(commented)[0] == load_scenario(left_out)[0]


@pytest.mark.parametrize("section, needed", [("cluster", "node"), ("training", "global_batch")])
def test_a_required_section_with_all_its_keys_commented_out_is_refused_naming_file_and_key(tmp_path, section,
                                                                                            needed):
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data[section] = None
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2
    assert str(path) in result.output and f"key '{section}'" in result.output and "empty" in result.output
    assert f"at least {needed}" in result.output, result.output
