"""GEMM rates read from NVIDIA's aiconfigurator GEMM tables (ai-dynamo/aiconfigurator @095f58a5,
systems/data/<system>/gemm/trtllm/1.3.0rc20/gemm_perf.parquet): best large GEMM (m 8192/16384, n and k
4096-16384) per part, at the benchmark clock (training_clock_fraction is applied on top, 1.0 on these parts)."""

from __future__ import annotations

import pytest

from scalesim.costs.compute import achieved_peak_flop_per_s
from scalesim.hardware import get_gpu

TF = 1e12
GIB = 2 ** 30


def _rate(gpu_id: str, precision: str) -> float:
    gpu = get_gpu(gpu_id)
    return achieved_peak_flop_per_s(gpu, precision) / gpu.training_clock_fraction


# (part, best large bf16 GEMM, best large FP8 GEMM) in TFLOPS, as the tables measure them.
MEASURED = [("rtx-pro-6000", 435.6, 779.1), ("l40s", 248.6, 398.6)]


@pytest.mark.parametrize("gpu_id, bf16, fp8", MEASURED)
def test_a_part_with_no_measured_sibling_runs_its_own_measured_bf16_gemm_rate(gpu_id, bf16, fp8):
    assert _rate(gpu_id, "bf16") == pytest.approx(bf16 * TF, rel=2e-3)
    # the tables' FP8 path reads mamf-finder's FP8 low on Blackwell, so its FP8 figure is a floor, not adopted
    gpu = get_gpu(gpu_id)
    assert fp8 * TF <= _rate(gpu_id, "fp8")
    assert _rate(gpu_id, "fp8") / gpu.fp8_flop_per_s <= _rate(gpu_id, "bf16") / gpu.bf16_flop_per_s + 1e-9


def test_gb300_bf16_runs_its_measured_best_large_gemm():
    # GB300: 2083.6 TFLOPS at 16384 x 10240 x 16384 (the table's device column reads 'NVIDIA GB300').
    assert _rate("gb300", "bf16") == pytest.approx(2083.6 * TF, rel=2e-3)


def test_gb300_fp8_keeps_the_tables_gb300_to_gb200_ratio_on_gb200s_measured_rate():
    # The tables' FP8 path reads mamf-finder's FP8 7-12% low on GB200 and B300, so GB300's own FP8 reading
    # (3447.5) would put it under GB200's measured 3615.6; the same tables put GB300 at 1.074-1.089x GB200
    # in every TRT-LLM and SGLang collection (median 1.083), which is what GB300 keeps.
    ratio = _rate("gb300", "fp8") / _rate("gb200", "fp8")
    assert ratio == pytest.approx(1.083, rel=2e-3)
    assert _rate("gb300", "bf16") > _rate("gb200", "bf16")


def test_mi325x_memory_is_the_rocm_tables_256_gib():
    # AMD ROCm docs, GPU specifications: MI325X VRAM 256 GiB (MI300X 192 GiB, MI355X 288 GiB in the same column).
    assert get_gpu("mi325x").memory_bytes == 256 * GIB
    assert get_gpu("mi325x").memory_bytes / get_gpu("mi300x").memory_bytes == pytest.approx(256 / 192)
