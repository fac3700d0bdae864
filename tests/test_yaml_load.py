"""User YAML is read with safe_load's semantics, but nothing is silently dropped or unbounded."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim import InputError
from scalesim.cli import main
from scalesim.yaml_load import MAX_YAML_VALUES, parse_yaml_text, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def test_a_key_given_twice_is_refused_with_both_lines():
    with pytest.raises(InputError) as err:
        parse_yaml_text("name: x\nmodel: gpt2-350m\ntraining: {}\nmodel: gpt2-124m\n", file="s.yaml")
    message = str(err.value)
    assert "s.yaml" in message and "duplicate key 'model'" in message
    assert "line 2" in message and "line 4" in message


def test_duplicates_are_found_in_nested_mappings_too():
    with pytest.raises(InputError, match="duplicate key 'dp'"):
        parse_yaml_text("parallel:\n  dp: 8\n  tp: 1\n  dp: 4\n", file="s.yaml")


def test_a_merged_key_may_be_overridden_as_yaml_intends():
    data = parse_yaml_text("base: &b {dp: 8, tp: 1}\nplan:\n  <<: *b\n  dp: 4\n", file="s.yaml")
    assert data["plan"] == {"dp": 4, "tp": 1}


def test_every_shipped_yaml_file_reads_as_safe_load_reads_it():
    import yaml

    files = [p for d in ("scenarios", "topologies", "validation", "scalesim/hardware/data")
             for p in (ROOT / d).rglob("*.yaml")]
    assert len(files) > 20
    for path in files:
        assert read_yaml(path) == yaml.safe_load(path.read_text()), path


@pytest.mark.parametrize("text,says", [
    ("a: !!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
    ("a: &a [*a]\n", "recursive"),
    ("[" * 3000, "nested too deeply"),
    ("gpus: 1" + "0" * 5000, "digits"),            # Python could not even print it
    ("gpus: 0x" + "f" * 300, "beyond 2\\^1024"),
    # fuzz15: YAML 1.1 read these as 128, silently (global_batch: 0200 trained on 128 samples a step)
    ("global_batch: 0200\n", "an octal number in YAML 1.1 \\(128\\)"),
    ("global_batch: 2:08\n", "a base-60 number in YAML 1.1 \\(128\\)"),
    ("restart_s: 1:30.5\n", "a base-60 number in YAML 1.1 \\(90.5\\)"),
])
def test_unsafe_or_pathological_documents_are_refused(text, says):
    with pytest.raises(InputError, match=says):
        parse_yaml_text(text, file="s.yaml")


@pytest.mark.parametrize("text,value", [("00", 0), ("07", 7), ("-05", -5), ("0", 0), ("0x10", 16), ("0.5", 0.5)])
def test_a_zero_padded_number_that_octal_reads_the_same_is_kept(text, value):
    # review15e: fuzz15's octal refusal also refused 00..07, whose YAML 1.1 value is their decimal one
    assert parse_yaml_text(f"micro_batch: {text}\n", file="s.yaml") == {"micro_batch": value}


def test_aliases_cannot_expand_without_bound():
    lines = ["l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    for k in range(1, 7):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]")
    with pytest.raises(InputError, match=f"{MAX_YAML_VALUES:,}"):
        parse_yaml_text("\n".join(lines), file="s.yaml")


def test_garbage_bytes_are_an_input_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: \xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not UTF-8"):
        read_yaml(path)


def test_the_cli_reports_a_duplicate_model_instead_of_simulating_the_last(tmp_path):
    text = (ROOT / "scenarios" / "8x4090-ddp.yaml").read_text() + "model: gpt2-124m\n"
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "duplicate key 'model'" in result.output


def test_control_characters_are_refused_naming_line_column_and_character(tmp_path):
    from scalesim.errors import InputError
    from scalesim.yaml_load import read_yaml

    path = tmp_path / "bell.yaml"
    path.write_bytes(b"name: x\nmodel: gpt2\x00\n")
    with pytest.raises(InputError) as err:
        read_yaml(path)
    assert "line 2, column 12" in str(err.value) and "U+0000" in str(err.value)
