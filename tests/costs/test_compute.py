"""The roofline: compute-bound ops scale with FLOPs, memory-bound ops with bytes."""

import pytest

from hypothesis import given
from hypothesis import strategies as st

from scalesim.costs.compute import (KERNEL_OVERHEAD_S, attention_time_s, gemm_shape_efficiency, layer_time,
                                     op_time_s, optimizer_time_s)
from scalesim.hardware import get_gpu
from scalesim.models.spec import LayerSpec, OpSpec

H100 = get_gpu("h100-sxm")


def gemm(m, n, k):
    return OpSpec("g", "gemm", 2.0 * m * n * k, 0.0, (m, n, k))


def test_a_large_gemm_runs_at_achieved_peak():
    op = gemm(8192, 8192, 8192)
    t = op_time_s(op, H100, "bf16", 1) - KERNEL_OVERHEAD_S
    assert t == pytest.approx(op.flop / (H100.bf16_flop_per_s * H100.gemm_efficiency), rel=0.01)


@given(st.integers(1, 20000), st.integers(1, 20000))
def test_shape_efficiency_is_a_fraction(m, n):
    assert 0 < gemm_shape_efficiency(m, n, H100) <= 1


def test_a_gemm_that_fills_one_partial_wave_is_less_efficient():
    # 132 SMs: 133 tiles of 128x256 need two waves, the second nearly empty.
    assert gemm_shape_efficiency(128 * 133, 256, H100) < 0.8 * gemm_shape_efficiency(128 * 132, 256, H100)


def attention_op(s=4096, heads=32, d=128, causal=True):
    h = heads * d
    return OpSpec("attention", "attention", 4.0 * s * s * h, 4.0 * s * h, None, float(heads * s * s), causal)


def test_naive_attention_is_slower_than_flash_and_grows_with_the_scores():
    op = attention_op()
    assert attention_time_s(op, H100, "bf16", 1, "naive") > attention_time_s(op, H100, "bf16", 1, "flash")


def test_causal_flash_attention_skips_the_masked_half():
    causal = attention_time_s(attention_op(causal=True), H100, "bf16", 4, "flash") - KERNEL_OVERHEAD_S
    full = attention_time_s(attention_op(causal=False), H100, "bf16", 4, "flash") - KERNEL_OVERHEAD_S
    assert causal == pytest.approx(full / 2)


def test_fp8_gemms_are_faster_than_bf16_on_h100_but_not_by_more_than_the_peak_ratio():
    op = gemm(8192, 8192, 8192)
    fp8, bf16 = op_time_s(op, H100, "fp8", 1), op_time_s(op, H100, "bf16", 1)
    assert bf16 / 2 < fp8 < bf16


def test_geforce_bf16_training_runs_at_half_the_fp16_accumulate_rate():
    # Ada whitepaper: 165.2 TFLOPS with FP32 accumulate vs 330.3 with FP16 accumulate.
    assert get_gpu("rtx4090").bf16_flop_per_s == pytest.approx(330.3e12 / 2, rel=0.001)


def test_an_elementwise_op_runs_at_achieved_memory_bandwidth():
    op = OpSpec("add", "elementwise", 1e6, 3e8, None)
    t = op_time_s(op, H100, "bf16", 2) - KERNEL_OVERHEAD_S
    assert t == pytest.approx(2 * 3e8 * 2 / (H100.memory_bw_bytes_per_s * H100.memory_bw_efficiency))


def test_a_skinny_gemm_is_memory_bound():
    # m=1: a matrix-vector product reads the whole weight for 2 FLOP per element.
    op = gemm(1, 16384, 16384)
    t = op_time_s(op, H100, "bf16", 1) - KERNEL_OVERHEAD_S
    assert t == pytest.approx((16384 * 16384 + 2 * 16384) * 2 / (H100.memory_bw_bytes_per_s * H100.memory_bw_efficiency))


def test_faster_gpu_is_never_slower():
    op = gemm(4096, 4096, 4096)
    assert op_time_s(op, H100, "bf16", 4) < op_time_s(op, get_gpu("a100-80gb-sxm"), "bf16", 4)


def test_backward_is_twice_the_forward_for_gemms():
    layer = LayerSpec("l", "transformer_block", 0, (gemm(4096, 4096, 4096),), 0.0)
    t = layer_time(layer, H100, "bf16", 1)
    assert t.backward_s - 2 * KERNEL_OVERHEAD_S == pytest.approx(2 * (t.forward_s - KERNEL_OVERHEAD_S))


def test_recompute_adds_the_forward_under_full_checkpointing():
    layer = LayerSpec("l", "transformer_block", 0, (gemm(1024, 1024, 1024),), 0.0)
    assert layer_time(layer, H100, "bf16", 1, "full").recompute_s == layer_time(layer, H100, "bf16", 1).forward_s
    assert layer_time(layer, H100, "bf16", 1, "none").recompute_s == 0


def test_optimizer_step_is_memory_bound_streaming():
    params = 1e9
    t = optimizer_time_s(params, H100, "bf16") - KERNEL_OVERHEAD_S
    assert t == pytest.approx(params * 28 / (H100.memory_bw_bytes_per_s * H100.memory_bw_efficiency))
