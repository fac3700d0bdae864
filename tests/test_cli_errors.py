"""Bad input: exit 2 and one message naming the file, the key and what is allowed; never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOOD = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())


def run_cli(*args):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result


def scenario_file(tmp_path, data=None, text=None) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return str(path)


def changed(section, key, value):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    if section is None:
        data[key] = value
    else:
        data[section][key] = value
    return data


def expect_bad(tmp_path, data=None, text=None, *needles):
    path = scenario_file(tmp_path, data, text)
    result = run_cli("run", path, "--no-plots")
    assert result.exit_code == 2, result.output
    message = result.output
    assert path in message
    for needle in needles:
        assert needle in message, message
    return message


def test_missing_file(tmp_path):
    result = run_cli("run", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2 and "not found" in result.output


def test_invalid_yaml_names_the_line(tmp_path):
    expect_bad(tmp_path, None, "name: x\ncluster: [unclosed\n", "invalid YAML", "line")


def test_unknown_key_suggests_the_closest(tmp_path):
    data = changed("training", "micro_bach", 4)
    expect_bad(tmp_path, data, None, "training.micro_bach", "Did you mean 'micro_batch'")


def test_unknown_gpu_in_an_inline_node(tmp_path):
    data = changed("cluster", "node", {"gpu": "rtx4099", "gpus": 8})
    expect_bad(tmp_path, data, None, "cluster.node.gpu", "rtx4090")


def test_unknown_topology(tmp_path):
    data = changed("cluster", "node", "dgx-h10")
    expect_bad(tmp_path, data, None, "cluster.node", "dgx-h100")


def test_unknown_model(tmp_path):
    data = changed(None, "model", "gpt2-125m")
    expect_bad(tmp_path, data, None, "'model'", "gpt2-124m")


def test_plan_that_does_not_match_the_gpu_count(tmp_path):
    data = changed("parallel", "dp", 4)
    expect_bad(tmp_path, data, None, "parallel.dp", "8")


def test_more_gpus_than_the_cluster_has(tmp_path):
    data = changed("cluster", "gpus", 16)
    expect_bad(tmp_path, data, None, "cluster.gpus", "1..8")


@pytest.mark.parametrize("section,key,value", [
    ("training", "micro_batch", 0), ("training", "global_batch", -8), ("training", "seq_len", 0),
    ("parallel", "bucket_mb", 0), ("cluster", "gpus", 0),
])
def test_non_positive_sizes(tmp_path, section, key, value):
    expect_bad(tmp_path, changed(section, key, value), None, f"{section}.{key}", "greater than 0")


@pytest.mark.parametrize("value,says", [(-0.1, "greater than or equal to 0"), (0.9, "less than or equal to 0.5")])
def test_gpu_speed_spread_is_a_fraction_between_0_and_one_half(tmp_path, value, says):
    expect_bad(tmp_path, changed("cluster", "gpu_speed_spread", value), None, "cluster.gpu_speed_spread", says)


def test_global_batch_must_divide(tmp_path):
    expect_bad(tmp_path, changed("training", "global_batch", 100), None, "training.global_batch", "multiple")


def test_a_global_batch_that_would_take_hours_to_play_out_is_refused(tmp_path):
    # 524,288 samples at 8 per GPU on 8 GPUs: 8,192 micro-batches per step (a batch given
    # in tokens, say). Refused with the key and the cap instead of running for minutes.
    message = expect_bad(tmp_path, changed("training", "global_batch", 2**19), None, "training.global_batch",
                         "8,192 micro-batches", "4,096")
    assert "micro_batch" in message


def test_an_absurd_global_batch_is_refused_with_the_limit_and_why(tmp_path):
    message = expect_bad(tmp_path, changed("training", "global_batch", 10**12), None, "training.global_batch",
                         "1,000,000,000,000", "limit of 16,777,216")
    assert "batch sizes" in message


def test_bad_enum_lists_what_is_allowed(tmp_path):
    expect_bad(tmp_path, changed("training", "precision", "fp64"), None, "training.precision", "bf16")


def test_precision_the_gpu_lacks(tmp_path):
    data = changed("training", "precision", "fp8")
    data["cluster"]["node"] = "dgx-a100"
    expect_bad(tmp_path, data, None, "training.precision", "no fp8")


def test_empty_file(tmp_path):
    expect_bad(tmp_path, None, "", "empty")


def test_not_a_mapping(tmp_path):
    expect_bad(tmp_path, None, "- a\n- b\n", "mapping")


def test_unknown_topology_for_show():
    result = run_cli("topology", "show", "dgx-h10")
    assert result.exit_code == 2 and "dgx-h100" in result.output


def test_the_installed_command_never_prints_a_traceback(tmp_path):
    bad = scenario_file(tmp_path, changed("training", "micro_bach", 4))
    p = subprocess.run([sys.executable, "-m", "scalesim", "run", bad], capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "micro_batch" in p.stderr


def test_a_folder_given_as_a_node_design_says_so(tmp_path):
    result = run_cli("topology", "show", str(tmp_path))
    assert result.exit_code == 2 and "is a folder" in result.output


@pytest.mark.parametrize("content, says", [
    (b"garbage \x00\x01 not a log\n", "give --op"),
    (b"\xff\xfe\x80 not UTF-8\n", "give --op"),
    (b"", "the file is empty"),
    (None, "larger than 32 MiB"),
])
def test_calibrate_refuses_files_that_are_no_measurements(tmp_path, content, says):
    path = tmp_path / "log.txt"
    if content is None:
        with open(path, "wb") as handle:      # sparse: no 33 MB written
            handle.truncate(33 * 2**20)
    else:
        path.write_bytes(content)
    result = run_cli("calibrate", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and str(path) in result.output and says in result.output


def test_calibrate_names_a_file_it_cannot_read(tmp_path, monkeypatch):
    path = tmp_path / "log.txt"
    path.write_text("# nccl-tests\n")

    def unreadable(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", unreadable)
    result = run_cli("calibrate", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "Permission denied" in result.output and str(path) in result.output


def test_run_report_points_to_compare_which_writes_the_page(tmp_path):
    """A buyer with one design types run --report (the README's page is compare's): name the command."""
    scenario = str(ROOT / "scenarios" / "8x4090-ddp.yaml")
    result = CliRunner().invoke(main, ["run", scenario, "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"scalesim compare {scenario} --report" in result.output
    assert not (tmp_path / "r.html").exists()


def test_a_switch_count_that_does_not_divide_the_gpus_lists_the_counts_that_do(tmp_path):
    node = tmp_path / "node.yaml"
    node.write_text("gpu: rtx4090\ngpus: 8\nhost: {sockets: 2}\npcie: {switches: 3}\n")
    result = run_cli("topology", "show", str(node))
    assert result.exit_code == 2 and str(node) in result.output and "pcie.switches" in result.output
    assert "allowed: 0 (GPUs on the CPUs' root ports), 2, 4, 8" in result.output


def test_more_gpus_than_the_node_says_how_many_nodes_and_that_they_need_a_fabric(tmp_path):
    # gpus: 16 on one 8-GPU node said "allowed: 1..8"; nodes: 2 then said only that a fabric is required
    result = run_cli("run", scenario_file(tmp_path, changed("cluster", "gpus", 16)), "--no-plots")
    assert result.exit_code == 2 and "cluster.nodes: 2 holds 16" in result.output, result.output
    two = changed("cluster", "nodes", 2)
    result = run_cli("run", scenario_file(tmp_path, two), "--no-plots")
    assert result.exit_code == 2 and "e.g. fabric: {link:" in result.output, result.output
