"""calibrate with an empty measurement file: it says the file is empty and what it takes (it asked
for --op, and with --op for nccl-tests' '# Rank' lines)."""

import pytest
from click.testing import CliRunner

from scalesim.cli import main


@pytest.mark.parametrize("name, extra", [("log.txt", []), ("log.txt", ["--op", "all_reduce"]),
                                         ("gemm.csv", ["--gpu", "h100-sxm"])])
def test_an_empty_measurement_file_is_named_as_empty(tmp_path, name, extra):
    path = tmp_path / name
    path.write_text("\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(tmp_path / "out"), *extra])
    assert result.exit_code == 2
    assert str(path) in result.output and "empty" in result.output and "nccl-tests" in result.output


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text", ["# our rig, measured 2026-11\nmy-card: {base: l40s, memory_gb: 96}  # the 96 GB board\n",
                                  "- not a mapping\n"])
def test_calibrate_never_rewrites_a_catalog_file_it_did_not_write(tmp_path, text):
    folder = tmp_path / "my-catalog"
    folder.mkdir()
    (folder / "gpus.yaml").write_text(text)
    csv = ROOT / "tests" / "data" / "gemm-membw-mi300x-azure.csv"
    result = CliRunner().invoke(main, ["calibrate", str(csv), "--gpu", "mi300x", "--out", str(folder)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: option '--out'") and "not written by scalesim calibrate" in result.output
    assert (folder / "gpus.yaml").read_text() == text
    # a folder calibrate wrote is merged into, as before: run twice into a new one
    fresh = tmp_path / "calibrated"
    for _ in range(2):
        again = CliRunner().invoke(main, ["calibrate", str(csv), "--gpu", "mi300x", "--out", str(fresh)])
        assert again.exit_code == 0, again.output
