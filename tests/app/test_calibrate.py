"""`scalesim calibrate`: a user's nccl-tests and benchmark figures become a catalog folder that reproduces them."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.calibrate import calibrate, fit_gemm, gpu_of_device
from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import load_catalog
from scalesim.app.measurements import infer_op, parse_benchmark_csv, parse_nccl_tests

SAMPLE = Path(__file__).parents[1] / "data" / "nccl-tests-sample.txt"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def test_the_sample_reads_as_nccl_tests_prints_it():
    log = parse_nccl_tests(SAMPLE.read_text(), str(SAMPLE))
    assert (log.op, log.gpus, log.nodes) == ("all_gather", 8, 1)
    assert gpu_of_device(log.device, "x") == "h100-sxm"
    assert log.points[0].size_bytes == 2**20 and log.points[-1].size_bytes == 8 * 2**30
    assert log.points[-1].busbw_GBps == pytest.approx(360.60)      # out-of-place busbw column


def test_with_the_calibrated_folder_collective_reproduces_the_captured_busbw(tmp_path):
    out = tmp_path / "mine"
    result = invoke("calibrate", SAMPLE, "--link", "nvlink4", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "links.yaml").is_file()
    log = parse_nccl_tests(SAMPLE.read_text(), str(SAMPLE))
    large = [p for p in log.points if p.size_bytes >= 64 * 2**20]          # the bandwidth-bound sizes fitted
    sizes = ",".join(str(int(p.size_bytes)) for p in large)
    rows = json.loads(invoke("collective", "--topology", "dgx-h100", "--op", "all_gather", "--sizes", sizes,
                             "--catalog", out, "--json").output)
    for row, point in zip(rows, large):
        assert row["busbw_GBps"] == pytest.approx(point.busbw_GBps, rel=0.05)


def test_the_issue_command_without_out_writes_the_default_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("calibrate", SAMPLE.resolve(), "--link", "nvlink4")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "calibrated-catalog" / "links.yaml").is_file()
    assert "--catalog calibrated-catalog" in result.output


def test_gemm_and_bandwidth_rows_set_the_gpu_efficiencies(tmp_path):
    csv = tmp_path / "bench.csv"
    csv.write_text("kind,precision,m,n,k,value\n# lab H100, torch.matmul\ngemm,bf16,8192,8192,8192,700\n"
                   "gemm,bf16,16384,16384,8192,710\nmembw,,,,,2900\n")
    out = tmp_path / "mine"
    fits = calibrate([csv], out=out, gpu="h100-sxm")
    by_field = {f.field: f for f in fits}
    assert set(by_field) == {"gemm_efficiency", "memory_bw_efficiency"}
    assert by_field["memory_bw_efficiency"].after == pytest.approx(2900 / 3350, abs=1e-3)
    for check in by_field["gemm_efficiency"].checks:                       # after within the rows' spread
        assert check.after == pytest.approx(check.measured, rel=0.02)
    calibrated = load_catalog([out]).gpu("h100-sxm")
    assert calibrated.memory_bw_efficiency == by_field["memory_bw_efficiency"].after


def test_a_calibrated_gemm_efficiency_reproduces_a_shallow_gemm_where_depth_costs():
    # B200's catalog prices GEMM depth (gemm_k_overhead): the fit must divide it out, or the
    # simulator, which applies it, predicts a K = 1024 GEMM slower than the rate it was fitted to.
    from scalesim.app.measurements import GemmPoint
    from scalesim.costs.compute import KERNEL_OVERHEAD_S, op_time_s
    from scalesim.hardware import get_gpu
    from scalesim.models.spec import OpSpec

    gpu = get_gpu("b200")
    assert gpu.gemm_k_overhead > 0
    m, n, k, tflops = 16384, 4096, 1024, 1350.0          # XLA's sm_100 table (gpus.yaml b200 notes)
    fit = fit_gemm([GemmPoint("bf16", m, n, k, tflops)], gpu, fp8=False)
    calibrated = replace(gpu, gemm_efficiency=fit.after)
    gemm = OpSpec("gemm", "gemm", 2.0 * m * n * k, 0.0, gemm_mnk=(m, n, k))
    predicted = 2.0 * m * n * k / (op_time_s(gemm, calibrated, "bf16", 1) - KERNEL_OVERHEAD_S) / 1e12
    assert predicted == pytest.approx(tflops, rel=0.01)
    assert fit.checks[0].after == pytest.approx(tflops, rel=0.01)


def test_a_link_off_the_path_is_refused(tmp_path):
    result = invoke("calibrate", SAMPLE, "--link", "ib-ndr", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "--link" in result.output


def test_a_log_that_does_not_name_its_collective_needs_op():
    text = "\n".join(line for line in SAMPLE.read_text().splitlines() if "Collective test" not in line)
    with pytest.raises(InputError, match="--op"):
        parse_nccl_tests(text, "x.txt")
    assert parse_nccl_tests(text, "x.txt", op="all_gather").op == "all_gather"


def test_a_csv_without_the_header_is_refused():
    with pytest.raises(InputError, match="kind,precision,m,n,k,value"):
        parse_benchmark_csv("gemm,bf16,1,1,1,5\n", "b.csv")


def test_older_and_rccl_output_without_hashes_reads_too():
    # The layout of nccl-tests before 2.x and of rccl-tests (no '#' on the device and header lines,
    # an 'error' column); the figures are made up for this test.
    text = """ nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20
 Using devices
   Rank  0 Pid 1001 on nodeA device  0 [0x00] AMD Instinct MI300X
   Rank  1 Pid 1002 on nodeA device  1 [0x00] AMD Instinct MI300X
                                                     out-of-place                       in-place
       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144   float     sum    20.00   52.43   52.43  0e+00    21.00   49.93   49.93  0e+00
     2097152        524288   float     sum    30.00   69.91   69.91  0e+00    31.00   67.65   67.65  0e+00
"""
    log = parse_nccl_tests(text, "rccl.txt", op="all_reduce")
    assert (log.gpus, log.nodes, gpu_of_device(log.device, "x")) == (2, 1, "mi300x")
    assert [p.busbw_GBps for p in log.points] == [52.43, 69.91]


REAL_A100 = Path(__file__).parents[1] / "data" / "nccl-tests-a100-oci.txt"   # a published capture (its header)


def test_a_real_capture_calibrates_and_the_overlay_reproduces_it(tmp_path):
    """8x A100-SXM4-40GB, all_reduce_perf 10 GiB, 232.20 GB/s busbw (OCI tutorial, NCCL 2.26.5)."""
    log = parse_nccl_tests(REAL_A100.read_text(), str(REAL_A100))
    assert (log.op, log.gpus, log.nodes) == ("all_reduce", 8, 1)
    assert gpu_of_device(log.device, "x") == "a100-40gb-sxm"
    out = tmp_path / "mine"
    fits = calibrate([REAL_A100], out=out, link="nvlink3")
    # A ring all-reduce's busbw is what each GPU's NVLink port carries: efficiency = busbw / 300 GB/s.
    assert fits[0].after == pytest.approx(232.20 / 300, rel=0.01)
    rows = json.loads(invoke("collective", "--topology", "dgx-a100-40gb", "--op", "all_reduce",
                             "--sizes", "10737418240", "--catalog", out, "--json").output)
    assert rows[0]["busbw_GBps"] == pytest.approx(232.20, rel=0.05)


REAL_MI300X_CSV = Path(__file__).parents[1] / "data" / "gemm-membw-mi300x-azure.csv"   # Azure ND MI300X v5 figures


def test_real_gemm_and_copy_figures_set_the_mi300x_efficiencies(tmp_path):
    fits = {f.field: f for f in calibrate([REAL_MI300X_CSV], out=tmp_path / "mine", gpu="mi300x")}
    assert set(fits) == {"fp8_gemm_efficiency", "memory_bw_efficiency"}
    assert fits["memory_bw_efficiency"].after == pytest.approx(4110 / 5300, abs=1e-3)     # copy / datasheet
    for check in fits["fp8_gemm_efficiency"].checks:         # one efficiency explains every large GEMM to 10%
        assert check.after == pytest.approx(check.measured, rel=0.10)
    calibrated = load_catalog([tmp_path / "mine"]).gpu("mi300x")
    assert calibrated.fp8_gemm_efficiency == fits["fp8_gemm_efficiency"].after
    # the overlay's predicted 8192^3 GEMM is the measured one (Azure: 1159.23 TFLOPS), at the clock the part
    # holds in training (training_clock_fraction), which calibrate fits through
    from scalesim.costs.compute import achieved_peak_flop_per_s, relative_shape_efficiency
    rate = achieved_peak_flop_per_s(calibrated, "fp8") * relative_shape_efficiency(8192, 8192, calibrated)
    assert rate / 1e12 == pytest.approx(1159.23, rel=0.10)
    # the overlay pins the clock it was fitted through: a later built-in clock does not move the user's rate
    written = yaml.safe_load((tmp_path / "mine" / "gpus.yaml").read_text())["mi300x"]
    assert written["training_clock_fraction"] == load_catalog([]).gpu("mi300x").training_clock_fraction


REAL_H100 = Path(__file__).parents[1] / "data" / "nccl-tests-h100-issue290.txt"  # nccl-tests issue #290 (header)


def test_a_real_h100_capture_calibrates_nvlink4_and_the_overlay_reproduces_its_plateau(tmp_path):
    """8x H100 SXM, all_reduce_perf 128 MiB-4 GiB (NVLink SHARP), 383-474 GB/s busbw, as published. NVLS is
    bounded by the switch, not the NVLink port: the folder holds nvswitch-gen3 (tests/app/test_calibrate_bound.py)."""
    log = parse_nccl_tests(REAL_H100.read_text(), str(REAL_H100))    # no "Collective test" line: see below
    assert (log.op, log.gpus, log.nodes, gpu_of_device(log.device, "x")) == ("all_reduce", 8, 1, "h100-sxm")
    out = tmp_path / "mine"
    result = invoke("calibrate", REAL_H100, "--link", "nvlink4", "--out", out)          # the issue's command
    assert result.exit_code == 0, result.output
    assert (out / "links.yaml").is_file()
    fitted = [p for p in log.points if p.busbw_GBps >= 0.95 * max(q.busbw_GBps for q in log.points)]
    assert [p.size_bytes for p in fitted] == [2**30, 2**31, 2**32]   # the plateau; 128-512 MiB still climb
    sizes = ",".join(str(int(p.size_bytes)) for p in fitted)
    rows = json.loads(invoke("collective", "--topology", "dgx-h100", "--op", "all_reduce", "--sizes", sizes,
                             "--catalog", out, "--json").output)
    for row, point in zip(rows, fitted, strict=True):
        assert row["busbw_GBps"] == pytest.approx(point.busbw_GBps, rel=0.05)


HEADER = "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".split()


@pytest.mark.parametrize("redop, root, algbw, busbw, ranks, op", [
    ("sum", -1, 270.63, 473.60, 8, "all_reduce"),        # busbw = algbw x 2(n-1)/n (nccl-tests all_reduce.cu)
    ("sum", -1, 400.00, 350.00, 8, "reduce_scatter"),    # x (n-1)/n
    ("none", 0, 300.00, 300.00, 8, "broadcast"),         # x 1, a root
    ("sum", 0, 300.00, 300.00, 8, "reduce"),
    ("sum", -1, 300.00, 300.00, 8, "send_recv"),         # x 1, no root (sendrecv.cu runs with redop sum)
    ("none", -1, 400.00, 350.00, 8, None),               # all-gather or all-to-all: both print this
    ("sum", -1, 300.00, 300.00, 2, None),                # 2 ranks: all-reduce and send/recv alike
])
def test_the_collective_follows_from_nccl_tests_own_busbw_definitions(redop, root, algbw, busbw, ranks, op):
    row = ["1073741824", "268435456", "float", redop, str(root), "100", str(algbw), str(busbw), "0",
           "100", str(algbw), str(busbw), "0"]
    assert infer_op(row, HEADER, ranks) == op


def test_calibrating_the_nvls_switch_fits_its_pipeline_fill_on_the_climbing_sizes(tmp_path):
    """The real 8x H100 capture climbs 383 -> 432 GB/s from 128 to 512 MiB before its 465-474 GB/s plateau:
    the switch's efficiency takes the plateau, its nvls_pipeline_fill the climb (collectives/nvls.py)."""
    out = tmp_path / "mine"
    fits = calibrate([REAL_H100], out=out, link="nvswitch-gen3")
    assert [(f.entry, f.field) for f in fits] == [("nvswitch-gen3", "efficiency"), ("nvswitch-gen3", "nvls_pipeline_fill")]
    ramp = [c for c in fits[1].checks if c.fitted]
    assert [c.what for c in ramp] == [f"all_reduce 8 GPUs {s} MiB" for s in (128, 256, 512)]
    assert sum(abs(c.after / c.measured - 1) for c in ramp) < sum(abs(c.before / c.measured - 1) for c in ramp)
    entry = load_catalog([out]).link("nvswitch-gen3")
    assert entry.nvls_pipeline_fill == fits[1].after and entry.efficiency == fits[0].after
    log = parse_nccl_tests(REAL_H100.read_text(), str(REAL_H100))
    rows = json.loads(invoke("collective", "--topology", "dgx-h100", "--sizes",
                             ",".join(str(int(p.size_bytes)) for p in log.points), "--catalog", out, "--json").output)
    # Every captured size within 6%: 128 MiB stays at -5.3% (see the report: the capture's deficit grows from
    # 128 to 512 MiB at one chunk size, which a fill, fixed per chunk size, cannot follow).
    for row, point in zip(rows, log.points, strict=True):
        assert row["busbw_GBps"] == pytest.approx(point.busbw_GBps, rel=0.06)
