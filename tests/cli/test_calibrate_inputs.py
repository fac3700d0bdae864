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


@pytest.mark.parametrize("text", ["# our rig, measured 2026-11\nmy-card: {base: l40s, memory_gb: 96}  # 96 GB\n",
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


@pytest.mark.parametrize("row, unit, side", [
    ("gemm,bf16,8192,8192,8192,780500", "TFLOP/s", "above"),   # GFLOP/s typed as TFLOP/s
    ("membw,,,,,2850000", "GB/s", "above"),                     # MB/s typed as GB/s
    ("gemm,bf16,8192,8192,8192,0.0007", "TFLOP/s", "below"),   # 0.7 PFLOP/s in PFLOP/s (fuzz15)
    ("membw,,,,,0.0028", "GB/s", "below")])                     # 2.8 TB/s in PB/s (fuzz15)
def test_a_measurement_outside_the_gpus_range_is_refused_not_written(tmp_path, row, unit, side):
    """780,500 'TFLOP/s' on an H100 (dense bf16 peak ~989) was fitted to an efficiency of 1.0 and written; a
    thousandth of the peak was written as gemm_efficiency 0.0, a folder no command could then read."""
    path = tmp_path / "bench.csv"
    path.write_text(f"kind,precision,m,n,k,value\n{row}\n")
    out = tmp_path / "cal"
    result = CliRunner().invoke(main, ["calibrate", str(path), "--gpu", "h100-sxm", "--out", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "h100-sxm" in result.output and unit in result.output and side in result.output
    assert not out.exists()


def test_an_unknown_op_names_the_option():
    result = CliRunner().invoke(main, ["calibrate", str(ROOT / "tests" / "data" / "nccl-tests-a100-oci.txt"),
                                       "--op", "allreduce"])
    assert result.exit_code == 2 and "'--op'" in result.output and "all_reduce" in result.output


@pytest.mark.parametrize("row, gpu, names", [
    ("gemm,bf17,8192,8192,8192,700", "h100-sxm", ["bench.csv", "'precision'", "row 2"]),
    ("gemm,fp8,8192,8192,8192,500", "a100-80gb-sxm", ["'--gpu'", "fp8"])])
def test_a_precision_the_gpu_or_the_csv_cannot_take_names_where_it_came_from(tmp_path, row, gpu, names):
    path = tmp_path / "bench.csv"
    path.write_text(f"kind,precision,m,n,k,value\n{row}\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--gpu", gpu, "--out", str(tmp_path / "cal")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert all(n in result.output for n in names), result.output


@pytest.mark.parametrize("row", ["gemm,bf16,8192,8192,8192,nan",      # fuzz15: fitted and written at exit 0
                                 "gemm,bf16,8192,8192,8192,inf",      # was blamed on --gpu (above the peak)
                                 "gemm,bf16,0,8192,8192,500",         # was a ZeroDivisionError traceback
                                 "membw,,,,,nan"])
def test_a_csv_value_or_dimension_that_is_not_a_positive_finite_number_names_the_file_and_row(tmp_path, row):
    path = tmp_path / "bench.csv"
    path.write_text(f"kind,precision,m,n,k,value\n{row}\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--gpu", "h100-sxm", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.startswith(f"error: {path}: row 2") and "finite" in result.output
    assert not (tmp_path / "c").exists()


def _nccl_log(tmp_path, rows):
    lines = (ROOT / "tests" / "data" / "nccl-tests-sample.txt").read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.split() and line.split()[0].isdigit())
    path = tmp_path / "log.txt"
    path.write_text("".join(lines[:first]) + "".join(r + "\n" for r in rows) + "".join(lines[first:]))
    return path


def test_rows_whose_busbw_prints_as_zero_are_left_out_of_the_fit(tmp_path):
    """nccl-tests prints busbw 0.00 for its smallest sizes (-b 8): calibrate divided by it (a traceback)."""
    tiny = "           8             2     float    none      -1    20.10    0.00    0.00      0    20.00    0.00    0.00      0"
    result = CliRunner().invoke(main, ["calibrate", str(_nccl_log(tmp_path, [tiny])), "--out", str(tmp_path / "c")])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_a_nan_busbw_in_an_nccl_tests_row_names_the_file_and_the_row(tmp_path):
    row = "        1024           256     float    none      -1    20.10    0.05     nan      0    20.00    0.05    0.04      0"
    path = _nccl_log(tmp_path, [row])
    result = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert str(path) in result.output and "nan" in result.output and "finite" in result.output
