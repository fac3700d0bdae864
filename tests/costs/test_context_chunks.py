"""Attention under context parallelism: cp ring steps, one kernel each, at the rate the kernel
has on the chunk length (AMD's published rates by length and mask)."""

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, attention_time_s
from scalesim.costs.flash import FLASH_BACKWARD_FLOP_RATIO
from scalesim.hardware import get_gpu
from scalesim.models.zoo import get_model
from scalesim.parallel.sharding import shard_layer


def attention(cp):
    block = get_model("llama2-70b", seq_len=8192).layers[1]
    return next(op for op in shard_layer(block, 1, cp, False).ops if op.kind == "attention")


def test_sharding_over_cp_gives_the_attention_one_ring_step_per_rank():
    assert attention(4).ring_steps == 4 and attention(1).ring_steps == 1


@pytest.mark.parametrize("backward", [False, True])
def test_mi300x_cp4_rank_runs_its_quarter_at_the_2048_token_rates(backward):
    # ROCm/aiter op_tests/cpp/mha/README.md, MI300X, batch 1, 64/8 heads, hdim 128, 2048 tokens:
    # causal forward 392.425, backward 279.72; full mask 485.45, 437.26 TFLOPS. One step in four
    # is the causal diagonal; each step does a quarter of the rank's causal half of the pairs.
    op, gpu = attention(4), get_gpu("mi300x")
    causal, full = (279.72, 437.26) if backward else (392.425, 485.45)
    executed = op.flop / 2 * (FLASH_BACKWARD_FLOP_RATIO if backward else 1)
    expected = executed / 1e12 * (0.25 / causal + 0.75 / full) + 4 * KERNEL_OVERHEAD_S * (2 if backward else 1)
    assert attention_time_s(op, gpu, "bf16", 1, "flash", backward=backward) == pytest.approx(expected, rel=0.01)


def test_without_rates_by_length_a_ring_step_only_adds_its_launch():
    h100 = get_gpu("h100-sxm")
    whole, split = attention(1), attention(4)
    one = attention_time_s(whole, h100, "bf16", 1, "flash") - KERNEL_OVERHEAD_S
    assert attention_time_s(split, h100, "bf16", 1, "flash") == pytest.approx(one / 4 + 4 * KERNEL_OVERHEAD_S)
