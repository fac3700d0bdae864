"""The roofline: compute-bound ops scale with FLOPs, memory-bound ops with bytes."""

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from dataclasses import replace

from scalesim.costs.compute import (KERNEL_OVERHEAD_S, STREAM_BYTES_PER_SM_CYCLE, attention_time_s,
                                     gemm_shape_efficiency, layer_time, layout_conversion_s, op_time_s,
                                     streaming_bw_bytes_per_s)
from scalesim.costs.score_ops import SCORE_PASSES
from scalesim.hardware import get_gpu
from scalesim.models.spec import LayerSpec, OpSpec
from scalesim.models.transformer import gemm_op, transformer_block

H100 = get_gpu("h100-sxm")


def gemm(m, n, k):
    return OpSpec("g", "gemm", 2.0 * m * n * k, 0.0, (m, n, k))


def test_a_large_gemm_runs_at_achieved_peak():
    op = gemm(8192, 8192, 8192)
    t = op_time_s(op, H100, "bf16", 1) - KERNEL_OVERHEAD_S
    achieved = H100.bf16_flop_per_s * H100.gemm_efficiency * H100.training_clock_fraction
    assert t == pytest.approx(op.flop / achieved, rel=0.01)


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


def test_an_elementwise_op_runs_at_the_streaming_rate():
    op = OpSpec("add", "elementwise", 1e6, 3e8, None)
    t = op_time_s(op, H100, "bf16", 2) - KERNEL_OVERHEAD_S
    assert t == pytest.approx(2 * 3e8 * 2 / streaming_bw_bytes_per_s(H100))


@pytest.mark.parametrize("name", ["rtx3090", "rtx4090", "l40s", "a100-40gb-pcie", "a100-80gb-sxm", "h100-pcie",
                                  "h100-sxm", "h200-sxm", "b200", "rtx5090"])
def test_streaming_is_capped_by_dram_and_by_what_the_sms_issue(name):
    gpu = get_gpu(name)
    dram = gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency
    sm_side = gpu.sms * gpu.sm_clock_hz * gpu.training_clock_fraction * STREAM_BYTES_PER_SM_CYCLE
    assert gpu.sms > 0 and gpu.sm_clock_hz > 0
    assert streaming_bw_bytes_per_s(gpu) == pytest.approx(min(dram, sm_side))


def test_the_sm_clock_in_the_catalog_matches_the_fp32_peak():
    # FP32 peak = 2 FLOP x FP32 lanes per SM x SMs x clock; lanes are 64 on GA100, 128 on the others.
    for name in ("rtx3090", "rtx4090", "l40s", "a100-80gb-sxm", "h100-pcie", "h100-sxm"):
        gpu = get_gpu(name)
        lanes = gpu.fp32_flop_per_s / (2 * gpu.sms * gpu.sm_clock_hz)
        assert lanes == pytest.approx(64 if name.startswith("a100") else 128, rel=0.01)


def test_more_sm_clocks_never_slow_streaming_and_without_a_clock_dram_rules():
    faster = replace(H100, sm_clock_hz=2 * H100.sm_clock_hz)
    assert streaming_bw_bytes_per_s(faster) >= streaming_bw_bytes_per_s(H100)
    unknown = replace(H100, sm_clock_hz=0.0)
    assert streaming_bw_bytes_per_s(unknown) == H100.memory_bw_bytes_per_s * H100.memory_bw_efficiency


def test_geforce_cards_stream_at_dram_speed_and_hbm_parts_at_the_sm_roof():
    # GeForce parts have many fast SMs per byte of GDDR bandwidth; A100/H100 have few per byte of HBM.
    for name in ("rtx3090", "rtx4090"):
        gpu = get_gpu(name)
        assert streaming_bw_bytes_per_s(gpu) == gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency
    for name in ("a100-80gb-sxm", "h100-sxm"):
        gpu = get_gpu(name)
        assert streaming_bw_bytes_per_s(gpu) < gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency


def test_gemm_operands_are_not_capped_by_the_streaming_roof():
    # A skinny GEMM is memory-bound at the DRAM rate (TMA/cp.async tiles), unlike element-wise kernels.
    op = gemm(1, 16384, 16384)
    A100 = get_gpu("a100-80gb-sxm")
    t = op_time_s(op, A100, "bf16", 1) - KERNEL_OVERHEAD_S
    assert t == pytest.approx((16384 * 16384 + 2 * 16384) * 2 / (A100.memory_bw_bytes_per_s * A100.memory_bw_efficiency))


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


# --------------------------------------------------------------- attention with materialised scores

def test_fused_softmax_attention_sits_between_flash_and_naive():
    op = attention_op(s=2048, heads=16, d=128)
    for backward in (False, True):
        flash, fused, naive = (attention_time_s(op, H100, "bf16", 2, a, backward=backward)
                               for a in ("flash", "fused", "naive"))
        assert flash < fused < naive


def test_materialised_attention_time_grows_with_the_score_passes():
    op = attention_op(s=2048, heads=16, d=128)
    fwd, bwd = SCORE_PASSES["naive"]
    extra_fwd = attention_time_s(op, H100, "bf16", 1, "naive") - attention_time_s(op, H100, "bf16", 1, "fused")
    extra_bwd = (attention_time_s(op, H100, "bf16", 1, "naive", backward=True)
                 - attention_time_s(op, H100, "bf16", 1, "fused", backward=True))
    per_pass = op.score_elements * 2 / streaming_bw_bytes_per_s(H100)
    assert extra_fwd == pytest.approx((fwd - SCORE_PASSES["fused"][0]) * per_pass + 2 * KERNEL_OVERHEAD_S)
    assert extra_bwd == pytest.approx((bwd - SCORE_PASSES["fused"][1]) * per_pass + KERNEL_OVERHEAD_S)


def test_flash_backward_recomputes_the_scores_five_gemms_against_two():
    # FlashAttention's benchmark counts its backward as 2.5x the forward FLOP (QK^T again, then
    # dV, dP, dQ, dK); no published backward/forward rate pair for A100 here, so the FLOP ratio alone.
    A100 = get_gpu("a100-80gb-sxm")
    op = attention_op(s=256, heads=8, d=128)      # tiny scores: the GEMMs dominate
    fwd = attention_time_s(op, A100, "bf16", 64, "flash") - KERNEL_OVERHEAD_S
    bwd = attention_time_s(op, A100, "bf16", 64, "flash", backward=True) - 2 * KERNEL_OVERHEAD_S
    assert bwd == pytest.approx(5 / 2 * fwd)


def test_flash2_backward_on_h100_runs_at_the_fa3_papers_backward_rate():
    # Shah et al. 2024, Figs. 5a/6 (H100 SXM5, head dim 128, 16k): FlashAttention-2 370 TFLOPS
    # forward, 322 backward, each against its own FLOP count (backward 2.5x forward).
    op = attention_op(s=16384, heads=16, d=128)
    fwd = attention_time_s(op, H100, "bf16", 1, "flash2") - KERNEL_OVERHEAD_S
    bwd = attention_time_s(op, H100, "bf16", 1, "flash2", backward=True) - 2 * KERNEL_OVERHEAD_S
    assert (2.5 / bwd) / (1 / fwd) == pytest.approx(322 / 370, abs=0.01)


def test_unknown_attention_is_refused():
    with pytest.raises(ValueError):
        attention_time_s(attention_op(), H100, "bf16", 1, "sparse")


# --------------------------------------------------------------- conv memory format

def conv(cin, cout, kernel, size, stride=1):
    from scalesim.models.resnet import conv_op
    return conv_op("c", cin, cout, kernel, stride, size)[0]


def test_nchw_convs_in_16_bit_pay_three_layout_conversions_of_input_and_output():
    op = conv(256, 64, 1, 56)
    layer = LayerSpec("block", "conv_block", 0, (op,), 0.0)
    A100 = get_gpu("a100-80gb-sxm")
    nhwc = layer_time(layer, A100, "fp16", 64, memory_format="nhwc")
    nchw = layer_time(layer, A100, "fp16", 64, memory_format="nchw")
    _, n, k = op.gemm_mnk
    activations = (op.elements_moved - k * n) * 64 * 2        # input + output bytes of the micro-batch
    conversion = 2 * activations / streaming_bw_bytes_per_s(A100) + 2 * KERNEL_OVERHEAD_S   # read + write each
    assert nchw.forward_s - nhwc.forward_s == pytest.approx(conversion)
    # data- and weight-gradient passes convert their tensors again: twice the forward's conversions
    assert nchw.backward_s - nhwc.backward_s == pytest.approx(2 * conversion)


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_fp32_and_tf32_convs_do_not_convert_layouts(precision):
    op = conv(64, 64, 3, 56)
    A100 = get_gpu("a100-80gb-sxm")
    assert layout_conversion_s(op, A100, precision, 32, "nchw") == 0
    assert op_time_s(op, A100, precision, 32, memory_format="nchw") == op_time_s(op, A100, precision, 32)


def test_memory_format_leaves_transformers_alone():
    layer = LayerSpec("l", "transformer_block", 0, (gemm(4096, 4096, 4096), attention_op(s=1024)), 0.0)
    assert layer_time(layer, H100, "bf16", 2, memory_format="nchw") == layer_time(layer, H100, "bf16", 2)


def test_unknown_memory_format_is_refused():
    with pytest.raises(ValueError):
        layout_conversion_s(conv(64, 64, 3, 56), H100, "bf16", 1, "chwn")


def test_a_3x3_conv_reads_its_input_once_not_once_per_kernel_tap():
    # Same GEMM (m, n, k) and FLOPs: a 3x3 conv over 16 channels and a 1x1 conv over
    # 144 channels. Only the 1x1 really has 9x the input in memory; implicit GEMM
    # reads the 3x3's input once, so it is the faster of the two (the 1x1 is memory-bound).
    three = conv(16, 16, 3, 112)
    one = conv(144, 16, 1, 112)
    assert three.gemm_mnk == one.gemm_mnk and three.flop == one.flop
    A100 = get_gpu("a100-80gb-sxm")
    t3, t1 = op_time_s(three, A100, "fp16", 256), op_time_s(one, A100, "fp16", 256)
    assert t3 < t1


# --------------------------------------------------------------- power-limited clock

def test_a_lower_training_clock_slows_compute_and_sm_issue_but_not_dram_or_the_mfu_peak():
    A100 = get_gpu("a100-80gb-sxm")
    slow = replace(A100, training_clock_fraction=0.5)
    big = gemm(8192, 8192, 8192)
    fast_t = op_time_s(big, A100, "bf16", 1) - KERNEL_OVERHEAD_S
    slow_t = op_time_s(big, slow, "bf16", 1) - KERNEL_OVERHEAD_S
    assert slow_t == pytest.approx(2 * fast_t)                        # compute-bound: half the clock, twice the time
    # A100's memory-bound kernels sit on the SM-issue roof, below DRAM: it scales with the clock.
    assert streaming_bw_bytes_per_s(slow) == pytest.approx(streaming_bw_bytes_per_s(A100) / 2)
    assert slow.peak_flop_per_s("bf16") == A100.peak_flop_per_s("bf16")   # MFU's denominator stays the datasheet
    # A 4090's element-wise kernels are DRAM-bound even at half the clock: unchanged.
    rtx = get_gpu("rtx4090")
    add = OpSpec("add", "elementwise", 0.0, 3.0 * 2**24)
    assert op_time_s(add, replace(rtx, training_clock_fraction=0.5), "bf16", 8) == op_time_s(add, rtx, "bf16", 8)


# --------------------------------------------------------------- flash kernel generations

def test_flash3_beats_flash2_on_hopper_by_the_papers_ratio_and_flash2_is_flash_on_ampere():
    from scalesim.costs.compute import FLASH_KERNEL_EFFICIENCY

    op = attention_op(s=8192)
    fa2 = attention_time_s(op, H100, "bf16", 8, "flash2") - KERNEL_OVERHEAD_S
    fa3 = attention_time_s(op, H100, "bf16", 8, "flash3") - KERNEL_OVERHEAD_S
    ratio = FLASH_KERNEL_EFFICIENCY["flash3"]["hopper"] / FLASH_KERNEL_EFFICIENCY["flash2"]["hopper"]
    assert fa2 / fa3 == pytest.approx(ratio, rel=1e-6)            # compute-bound at this length
    A100 = get_gpu("a100-80gb-sxm")
    assert attention_time_s(op, A100, "bf16", 8, "flash2") == attention_time_s(op, A100, "bf16", 8, "flash")


def test_a_kernel_generation_without_a_measurement_for_the_gpu_is_refused():
    with pytest.raises(ValueError, match="flash3"):
        attention_time_s(attention_op(), get_gpu("a100-80gb-sxm"), "bf16", 1, "flash3")


# ------------------------------------------------------------ compute beside communication kernels

def test_a_one_wave_gemm_takes_two_waves_when_nccl_holds_24_sms():
    # NVIDIA developer forum, "Compute-Communication Overlap Causes Severe GEMM Performance
    # Degradation because of Tail Effect": on an H100 (132 SMs) a GEMM of exactly 132 blocks
    # next to a 24-block ncclAllGather takes nearly twice as long. 12 x 11 tiles of 128 x 256.
    op = gemm_op("one_wave", 12 * 128, 11 * 256, 8192)
    alone = op_time_s(op, H100, "bf16", 1)
    beside = op_time_s(op, H100, "bf16", 1, held_sms=24)
    assert 1.8 < beside / alone <= 2.0


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 64), n=st.integers(1, 64), held=st.integers(0, 60), more=st.integers(1, 30))
def test_holding_more_sms_never_makes_a_layer_faster(m, n, held, more):
    op = gemm_op("g", 128 * m, 128 * n, 4096)
    times = [op_time_s(op, H100, "bf16", 1, held_sms=h) for h in (0, held, held + more)]
    assert times[0] <= times[1] * (1 + 1e-12) and times[1] <= times[2] * (1 + 1e-12)
    block = transformer_block("b", s=2048, h=128 * n, heads=n, kv_heads=n, f=512 * n)
    layer = [layer_time(block, H100, "bf16", 1, held_sms=h) for h in (held, held + more)]
    assert layer[0].forward_s <= layer[1].forward_s * (1 + 1e-12)
    assert layer[0].backward_s <= layer[1].backward_s * (1 + 1e-12)


def test_memory_bound_kernels_slow_only_where_the_sms_not_dram_set_their_rate():
    # An A100's element-wise kernels are SM-issue bound (STREAM_BYTES_PER_SM_CYCLE): fewer SMs,
    # slower. A 4090's are DRAM bound with SMs to spare: two SMs held change nothing.
    a100, rtx4090 = get_gpu("a100-80gb-sxm"), get_gpu("rtx4090")
    assert streaming_bw_bytes_per_s(a100, held_sms=24) < streaming_bw_bytes_per_s(a100)
    assert streaming_bw_bytes_per_s(rtx4090, held_sms=2) == streaming_bw_bytes_per_s(rtx4090)


def test_fp32_gemms_without_tensor_cores_run_at_the_sgemm_rate_not_the_tensor_core_one():
    # fp32 training with TF32 off runs cuBLAS SGEMM on the CUDA cores; on GA100 it keeps the 64 FP32
    # lanes per SM nearly saturated (>0.9 of the non-tensor peak, gpus.yaml), unlike the power-limited
    # tensor-core GEMMs behind gemm_efficiency (0.80 on the 300 W A100 PCIe).
    a100 = get_gpu("a100-80gb-pcie")
    op = gemm(8192, 8192, 8192)
    rate = op.flop / (op_time_s(op, a100, "fp32", 1) - KERNEL_OVERHEAD_S)
    assert rate > 0.9 * a100.fp32_flop_per_s
    assert a100.gemm_efficiency_for("bf16") == a100.gemm_efficiency          # tensor-core precisions unchanged
    plain = replace(a100, fp32_gemm_efficiency=None)                          # no SGEMM figure: gemm_efficiency
    assert plain.gemm_efficiency_for("fp32") == plain.gemm_efficiency
    # eager attention's QK^T and AV batched GEMMs are SGEMMs too
    block = transformer_block("b", s=2048, h=3072, heads=24, kv_heads=24, f=12288)
    attn = next(o for o in block.ops if o.kind == "attention")
    assert attention_time_s(attn, a100, "fp32", 1, "naive") < attention_time_s(attn, plain, "fp32", 1, "naive")


def test_a_backward_only_kernel_adds_its_own_time_to_backward_and_nothing_to_forward():
    from scalesim.costs.host import layer_kernels
    gpu = H100
    relu = OpSpec("relu", "elementwise", 1e6, 2e6)
    grad = OpSpec("bn_backward", "norm", 0.0, 3e6, backward_only=True)
    alone, both = (LayerSpec("l", "conv_block", 0, ops, 0.0) for ops in ((relu,), (relu, grad)))
    t_alone, t_both = layer_time(alone, gpu, "fp16", 64), layer_time(both, gpu, "fp16", 64)
    assert t_both.forward_s == t_alone.forward_s
    assert t_both.backward_s - t_alone.backward_s == pytest.approx(op_time_s(grad, gpu, "fp16", 64))
    assert layer_kernels(both, "flash")[:2] == (layer_kernels(alone, "flash")[0], layer_kernels(alone, "flash")[1] + 1)
