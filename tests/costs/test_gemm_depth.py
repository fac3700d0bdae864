"""GEMM speed by reduction depth: shallow GEMMs pay a fixed cost per output tile (gpus.yaml gemm_k_overhead)."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, fp8_cast_s, fp8_grad_cast_s, layer_time, op_time_s
from scalesim.costs.finetune import FinetuneSpec, finetune_layer_time
from scalesim.costs.gemm_depth import REFERENCE_DEPTH, depth_efficiency
from scalesim.hardware import get_gpu
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.models.spec import LayerSpec, OpSpec

B200 = get_gpu("b200")


def gemm(m, n, k):
    return OpSpec("g", "gemm", 2.0 * m * n * k, m * k + k * n + m * n, (m, n, k))


def rate(op, gpu, precision="bf16"):
    """FLOP/s as a GEMM benchmark times it: launch and tail included."""
    return op.flop / op_time_s(op, gpu, precision, 1)


def test_b200_runs_shallow_gemms_slower_than_deep_ones_of_the_same_output():
    # XLA's measured sm_100 table: 16384 x 1024 x K runs 1039 TFLOPS at K = 1024, 1395 at K = 4096
    assert B200.gemm_k_overhead > 0
    shallow, deep = rate(gemm(16384, 1024, 1024), B200), rate(gemm(16384, 1024, 4096), B200)
    assert shallow / deep == pytest.approx(1039.2 / 1394.5, rel=0.05)


def test_the_depth_effect_vanishes_without_a_measured_overhead():
    flat = replace(B200, gemm_k_overhead=0.0)
    compute = [op.flop / (op_time_s(op, flat, "bf16", 1) - KERNEL_OVERHEAD_S)
               for op in (gemm(16384, 1024, 1024), gemm(16384, 1024, 4096))]
    assert compute[0] == pytest.approx(compute[1], rel=1e-12)


def test_the_reference_depth_runs_at_the_catalog_efficiency():
    assert depth_efficiency(REFERENCE_DEPTH, B200.gemm_k_overhead) == pytest.approx(1.0)
    assert depth_efficiency(512, B200.gemm_k_overhead) < depth_efficiency(1024, B200.gemm_k_overhead) < 1.0


def test_tf32_and_convolutions_keep_their_rates():
    assert depth_efficiency(1024, 390.0, "tf32") == 1.0
    assert depth_efficiency(1024, 390.0, "bf16", kind="conv") == 1.0


def test_b200_fp8_gemms_of_4096_tokens_slow_down_with_depth_as_measured():
    # XLA's sm_100 table, f8e4m3fn x f8e4m3fn -> bf16: 4096 x 4096 x K runs 1895 TFLOPS at K = 1024, 2765 at K = 4096
    # (M = 4096: the tokens per GPU of the MLPerf Llama 3.1 8B recipes at cp 2)
    # (the benchmark times the GEMM alone: no cast of its input)
    alone = [replace(gemm(4096, 4096, k), cast_share=0.0) for k in (1024, 4096)]
    shallow, deep = rate(alone[0], B200, "fp8"), rate(alone[1], B200, "fp8")
    assert shallow / deep == pytest.approx(1895.4 / 2765.0, rel=0.05)
    # the fixed per-tile cost covers more depth than in 16-bit, where the MMA does half the work per cycle
    assert depth_efficiency(1024, 390.0, "fp8") < depth_efficiency(1024, 390.0, "bf16") < 1.0


def test_fp8_weight_gradients_reduce_over_the_tokens():
    # An FP8 linear over 2048 tokens (tp 2, cp 4): its weight gradient reduces over 2048, shallower than the
    # forward's 4096, so backward takes more than twice the forward on B200, exactly twice without a depth cost
    # (the GEMMs; one FP8 cast each way: of the input forward, of the output gradient backward, costs/fp8_grad_casts.py)
    op = gemm(2048, 4096, 4096)
    block = LayerSpec("b", "transformer_block", 0, (op,), op.flop)
    flat_b200 = replace(B200, gemm_k_overhead=0.0)
    flat = layer_time(block, flat_b200, "fp8", 1)
    cast, grad_cast = fp8_cast_s(op, flat_b200, 1), fp8_grad_cast_s(op, flat_b200, 1)
    assert flat.backward_s == pytest.approx(2 * (flat.forward_s - cast) + grad_cast, rel=1e-12)
    deep = layer_time(block, B200, "fp8", 1)
    assert deep.backward_s > flat.backward_s and deep.forward_s > flat.forward_s


def test_backward_gemms_run_at_their_own_depths():
    # qkv of BERT-large over 24576 tokens: forward reduces over 1024, the data gradient over 3072
    # and the weight gradient over the 24576 tokens, so backward is less than twice the forward.
    op = gemm(512, 3072, 1024)
    block = LayerSpec("b", "transformer_block", 0, (op,), op.flop)
    deep = layer_time(block, B200, "fp16", 48)
    assert deep.backward_s < 2 * deep.forward_s
    flat = layer_time(block, replace(B200, gemm_k_overhead=0.0), "fp16", 48)
    assert flat.backward_s == pytest.approx(2 * flat.forward_s, rel=1e-12)
    assert deep.forward_s > flat.forward_s and deep.backward_s > flat.backward_s


def test_a_gpu_built_on_b200_keeps_its_gemm_depth_overhead():
    card = builtin_catalog().resolve_gpu({"base": "b200", "memory_gb": 96})
    assert card.gemm_k_overhead == B200.gemm_k_overhead > 0


def test_serving_prefill_pays_the_depth_cost_too():
    # A 4096-token bf16 prefill of Llama 3 8B (GEMMs of K 4096 and 14336) on B200 takes longer
    # with the measured per-tile cost than without it, and so do FP8 weights (FP8 MMAs, XLA's fp8 rows); INT8
    # (unmeasured) does not.
    from scalesim.costs.inference import ServingShard, iteration_compute_s, iteration_work
    from scalesim.models import get_model
    llama = get_model("llama3-8b", seq_len=1)
    work = iteration_work([(4096, 4096, True)])
    flat = replace(B200, gemm_k_overhead=0.0)
    for weights, slower in (("bf16", True), ("fp8", True), ("int8", False)):
        shard = ServingShard(llama, weights=weights)
        assert (iteration_compute_s(work, shard, B200) > iteration_compute_s(work, shard, flat)) is slower


def test_a_frozen_gemm_runs_full_trainings_data_gradient_and_no_weight_gradient():
    # LoRA / QLoRA's frozen base GEMM computes only its input gradient, which reduces over the
    # forward's n, as in full training: on a GPU that prices depth it is not the forward again.
    m, n, k, batch = 2048, 512, 8192, 4
    gemm = OpSpec("proj", "gemm", 2.0 * m * n * k, 0.0, gemm_mnk=(m, n, k))
    layer = LayerSpec("head", "head", n * k, (gemm,), 0.0)
    frozen = finetune_layer_time(layer, B200, "bf16", batch, FinetuneSpec("lora", 8, ("q",)))
    full = layer_time(layer, B200, "bf16", batch)
    weight_gradient = op_time_s(gemm, B200, "bf16", batch, depth=m * batch, tiles=(k, n))   # output k x n
    assert frozen.backward_s == pytest.approx(full.backward_s - weight_gradient, rel=1e-9)
    assert frozen.backward_s > frozen.forward_s           # depth n = 512 runs slower than the forward's 8192


A100 = get_gpu("a100-80gb-sxm")


def test_a100_runs_a_shallow_gemm_of_many_rows_at_the_rate_azure_measured():
    # Azure ND A100 v4, cuBLASLt FP16: 802816 x 192 x 768 at 157.8 TFLOPS, 8192^3 at 253.7 (0.62 of it);
    # the tile/wave shape model alone gives 0.74 (validation/fit_gemm_depth.py).
    bench = replace(A100, training_clock_fraction=1.0)
    shallow, reference = rate(gemm(802816, 192, 768), bench, "fp16"), rate(gemm(8192, 8192, 8192), bench, "fp16")
    assert shallow / reference == pytest.approx(157.8 / 253.7, rel=0.05)


@pytest.mark.parametrize("name", ["a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie", "a100-40gb-sxm"])
def test_every_ga100_part_computes_faster_per_flop_at_greater_depth(name):
    # Azure's A100 sweep: 4096^3 0.899, 8192^3 1, 16384^3 1.011 of the 8192^3 rate; same SM on every GA100 board.
    gpu = get_gpu(name)
    compute = [op.flop / (op_time_s(op, gpu, "fp16", 1) - KERNEL_OVERHEAD_S)
               for op in (gemm(16384, 4096, k) for k in (256, 768, 2048, 8192, 16384))]
    assert compute == sorted(compute) and compute[0] < compute[-1]


@pytest.mark.parametrize("name", ["a100-80gb-sxm", "b200", "rtx4090", "h100-sxm"])
def test_a_bigger_gemm_never_takes_less_time(name):
    # Physics: adding rows, columns or depth to a GEMM adds work; with the per-tile depth cost, tile and
    # wave quantization and the operand-traffic roof, no dimension's growth shortens it.
    gpu = get_gpu(name)
    sizes = (64, 96, 192, 768, 1000, 2048, 3072, 5120, 12288)

    def seconds(m, n, k):
        return op_time_s(gemm(m, n, k), gpu, "bf16", 1)

    def not_shorter(smaller, bigger):          # equal up to float rounding is allowed
        return bigger >= smaller * (1 - 1e-12)

    for m in sizes:
        for n in sizes:
            times = [seconds(m, n, k) for k in sizes]
            assert all(not_shorter(a, b) for a, b in zip(times, times[1:]))
            assert not_shorter(seconds(m, n, 768), seconds(2 * m, n, 768))
            assert not_shorter(seconds(m, n, 768), seconds(m, n + 64, 768))


@pytest.mark.parametrize("name", ["b200", "a100-80gb-sxm"])
def test_the_weight_gradient_of_few_tokens_runs_on_the_weights_own_tiles(name):
    # 64 tokens through a 1024 x 4096 weight: the forward has 64-row tiles, but the weight gradient writes the
    # whole 1024 x 4096 weight (many tiles) over a reduction of 64: its time is its depth cost on those tiles,
    # not on the forward's few, so backward (two GEMMs of the forward's FLOP) stays within ~2.5x the forward.
    gpu = get_gpu(name)
    op = gemm(64, 1024, 4096)
    block = LayerSpec("b", "transformer_block", 0, (op,), op.flop)
    step = layer_time(block, gpu, "bf16", 1)
    assert step.backward_s < 2.5 * step.forward_s
