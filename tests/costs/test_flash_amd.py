"""Flash attention on AMD Instinct: each pass at the rate AMD publishes for its assembly kernels."""

import pytest

from scalesim.costs.compute import attention_time_s
from scalesim.costs.flash import FLASH_BACKWARD_FLOP_RATIO as BACKWARD_FLOP_RATIO
from scalesim.hardware import get_gpu
from scalesim.models.zoo import get_model


def llama2_70b_attention():
    model = get_model("llama2-70b", seq_len=8192)
    return next(op for layer in model.layers for op in layer.ops if op.kind == "attention")


# ROCm/aiter op_tests/cpp/mha/README.md (asm kernels, BF16, hdim 128, 64/8 heads, batch 1, seqlen 8192,
# causal): MI300X fwd 518.29, bwd-a16 481.895 TFLOPS; MI355X fwd 1300.105, bwd-a16 1064.56 TFLOPS. In a
# training step MI300X holds the clock AMD's Max-Achievable FLOPs study measures under dense BF16 work at
# 750 W, a median 1207 of its 2100 MHz (rocm-blogs measuring-max-achievable-flops-part2, Table 1); no such
# figure for MI355X.
@pytest.mark.parametrize("gpu, forward_tflops, backward_tflops, clock", [("mi300x", 518.29, 481.895, 1207 / 2100),
                                                                         ("mi355x", 1300.105, 1064.56, 1.0)])
def test_the_llama2_70b_attention_runs_at_amds_published_kernel_rates_at_the_training_clock(
        gpu, forward_tflops, backward_tflops, clock):
    spec, op = get_gpu(gpu), llama2_70b_attention()
    executed = op.flop / 2                                        # causal: half the score blocks
    forward = attention_time_s(op, spec, "bf16", 1, "flash")
    backward = attention_time_s(op, spec, "bf16", 1, "flash", backward=True)
    assert executed / forward / 1e12 == pytest.approx(forward_tflops * clock, rel=0.01)
    assert BACKWARD_FLOP_RATIO * executed / backward / 1e12 == pytest.approx(backward_tflops * clock, rel=0.01)


def test_mi325x_runs_mi300x_attention_kernels_at_its_higher_power_limited_clock():
    # same compute die and kernels; the MAF study's median clock under BF16 GEMMs: 1447 MHz at 1000 W,
    # 1207 MHz at 750 W
    op = llama2_70b_attention()
    times = {g: attention_time_s(op, get_gpu(g), "fp8", 1, "flash", backward=True) for g in ("mi300x", "mi325x")}
    assert times["mi325x"] / times["mi300x"] == pytest.approx(1207 / 1447, rel=0.01)


def test_longer_sequences_never_take_less_attention_time():
    spec = get_gpu("mi300x")
    times = [attention_time_s(next(op for layer in get_model("llama2-70b", seq_len=s).layers for op in layer.ops
                                   if op.kind == "attention"), spec, "bf16", 1, "flash") for s in (2048, 4096, 8192)]
    assert times == sorted(times)


def test_forward_only_users_take_the_published_forward_rate_and_others_keep_theirs():
    from scalesim.costs.flash import FLASH_ATTENTION_EFFICIENCY, flash_efficiency
    assert flash_efficiency(get_gpu("mi300x"), "flash") == pytest.approx(518.29 / 1307.4)   # serving prefill
    assert flash_efficiency(get_gpu("h100-sxm"), "flash") == FLASH_ATTENTION_EFFICIENCY["hopper"]
