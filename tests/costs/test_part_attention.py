"""A part's own flash-attention rate within its architecture (costs/part_attention.py): GB300 against
GB200 in NVIDIA's cuDNN SDPA training benchmark; parts without a published row keep the arch rate."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, attention_time_s
from scalesim.costs.part_attention import SDPA_TFLOPS, part_speedup
from scalesim.hardware import get_gpu
from scalesim.models.spec import OpSpec

GB200, GB300 = get_gpu("gb200"), get_gpu("gb300")
LENGTHS = (1024, 2048, 3000, 8192, 12000, 32768, 131072)


def attention(s, causal, fp8, heads=64, d=128):
    return OpSpec("attention", "attention", 4.0 * s * s * heads * d, 4.0 * s * heads * d,
                  score_elements=float(heads * s * s), causal=causal, seq=s, fp8=fp8)


def kernel_s(gpu, op, backward=False):
    return attention_time_s(op, gpu, "fp8" if op.fp8 else "bf16", 1, "flash", backward=backward) \
        - (2 if backward else 1) * KERNEL_OVERHEAD_S


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backward", [False, True])
def test_a_part_with_a_faster_published_rate_is_never_slower(fp8, causal, backward):
    # every published GB300 rate is above GB200's at the same length, mask, pass and type
    assert all(p > r for key, row in SDPA_TFLOPS["gb300"].items()
               for p, r in zip(row, SDPA_TFLOPS["gb200"][key]))
    for s in LENGTHS:       # never slower; short kernels can be bound by their memory traffic on both
        op = attention(s, causal, fp8)
        assert kernel_s(GB300, op, backward) <= kernel_s(GB200, op, backward)
    op = attention(8192, causal, fp8)
    assert kernel_s(GB300, op, backward) < kernel_s(GB200, op, backward)


def test_gb300_runs_at_cudnns_measured_rate_over_gb200():
    # cudnn-frontend @60e572b7, llama3.1 shape, 8k tokens, causal: BF16 forward 1856 / 1574, FP8 backward 1781 / 1454
    assert kernel_s(GB200, attention(8192, True, False)) / kernel_s(GB300, attention(8192, True, False)) \
        == pytest.approx(1856 / 1574, rel=1e-3)
    assert kernel_s(GB200, attention(8192, True, True), True) / kernel_s(GB300, attention(8192, True, True), True) \
        == pytest.approx(1781 / 1454, rel=1e-3)


@pytest.mark.parametrize("name", ["b200", "b300", "gb200", "h100-sxm"])
def test_parts_without_a_published_row_run_at_the_arch_rate(name):
    gpu = get_gpu(name)
    assert all(part_speedup(gpu, s, c, False, b) == 1.0 for s in LENGTHS for c in (False, True) for b in (False, True))
    # a GB300 renamed to a part without a row runs at the architecture's rate: GB200's, its peaks being GB200's
    unlisted = replace(GB300, name="my-blackwell")
    for backward in (False, True):
        op = attention(8192, True, False)
        assert kernel_s(unlisted, op, backward) == pytest.approx(kernel_s(GB200, op, backward), rel=1e-9)


def test_the_ratio_is_taken_over_the_parts_peaks():
    # the measured rate is a rate: a listed part with a higher rated peak gets the same attention time
    faster_peak = replace(GB300, bf16_flop_per_s=GB300.bf16_flop_per_s * 1.25)
    op = attention(8192, True, False)
    assert kernel_s(faster_peak, op) == pytest.approx(kernel_s(GB300, op), rel=1e-9)


def test_other_kernels_keep_the_arch_rate():
    assert part_speedup(GB300, 8192, True, False, False, "flash2") == 1.0
