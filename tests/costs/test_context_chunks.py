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
def test_mi300x_cp4_rank_runs_its_quarter_at_the_chunk_rates(backward):
    # ROCm/aiter op_tests/cpp/mha/README.md, MI300X, batch 1, 64/8 heads, hdim 128: causal 2048 tokens
    # forward 392.425, backward 279.72 TFLOPS (the diagonal step, one in four); the three later steps
    # run 2048 queries against 1024 keys or 1024 against 2048, no mask: the equal-work square kernel,
    # half-way (in log2 of the length) between the full-mask 1024 rows (418.36, 292.68) and 2048 rows
    # (485.45, 437.26). Each step does a quarter of the rank's causal half of the pairs. All at the clock
    # MI300X holds in training, 1207 of 2100 MHz (AMD's Max-Achievable FLOPs study, costs/flash.py).
    op, gpu = attention(4), get_gpu("mi300x")
    causal, full = (279.72, (292.68 + 437.26) / 2) if backward else (392.425, (418.36 + 485.45) / 2)
    causal, full = causal * 1207 / 2100, full * 1207 / 2100
    executed = op.flop / 2 * (FLASH_BACKWARD_FLOP_RATIO if backward else 1)
    expected = executed / 1e12 * (0.25 / causal + 0.75 / full) + 4 * KERNEL_OVERHEAD_S * (2 if backward else 1)
    assert attention_time_s(op, gpu, "bf16", 1, "flash", backward=backward) == pytest.approx(expected, rel=0.01)


def test_without_rates_by_length_a_ring_step_only_adds_its_launch():
    h100 = get_gpu("h100-sxm")
    whole, split = attention(1), attention(4)
    one = attention_time_s(whole, h100, "bf16", 1, "flash") - KERNEL_OVERHEAD_S
    assert attention_time_s(split, h100, "bf16", 1, "flash") == pytest.approx(one / 4 + 4 * KERNEL_OVERHEAD_S)


def test_a_later_causal_ring_step_is_slower_than_a_square_chunk_kernel():
    # its kernel pairs s/cp queries with s/(2 cp) keys (or the reverse): the loop or the parallelism
    # of the shorter length, so it cannot run at the s/cp square kernel's rate
    from scalesim.costs.context_chunks import ring_time_factor
    from scalesim.costs.flash import length_rate
    square = 0.25 / length_rate("cdna3", 2048, True, True) + 0.75 / length_rate("cdna3", 2048, False, True)
    assert ring_time_factor("cdna3", 8192, True, 4, True) > square * 1.05


@pytest.mark.parametrize("kernel, causal_1k, full_724, causal_8k", [
    ("triton", 61, (78 + 85) / 2, 78),      # full mask: 512 -> 78, 1k -> 85; 724 half-way in log2
    ("flash2", 133, 187, 182),              # full-mask row starts at 2k (187), held below it
])
def test_on_a100_each_ring_step_runs_at_its_chunks_length_in_the_fa2_papers_table(kernel, causal_1k, full_724,
                                                                                    causal_8k):
    # Dao 2023, FlashAttention-2, Fig. 4 (A100, head dim 128, forward + backward TFLOPS). Llama 2 70B at
    # 8k tokens over cp 8: the diagonal step (1/8 of the work) is a causal 1k kernel, the seven later
    # ones unmasked kernels on 724-token squares (context_chunks.py); the unsplit rank runs a causal 8k one.
    a100 = get_gpu("a100-80gb-sxm")
    whole = attention_time_s(attention(1), a100, "bf16", 1, kernel) - KERNEL_OVERHEAD_S
    split = attention_time_s(attention(8), a100, "bf16", 1, kernel) - 8 * KERNEL_OVERHEAD_S
    expected = (1 / 8 / causal_1k + 7 / 8 / full_724) * causal_8k
    assert split / (whole / 8) == pytest.approx(expected, rel=1e-3)
