"""Flash attention by head shape: MLA's 192/128 heads at their measured speed, standard heads untouched."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import attention_time_s
from scalesim.costs.head_dims import MEASURED_RELATIVE, head_dim_factor
from scalesim.hardware import get_gpu
from scalesim.models.moe import MLASpec, mla_ops

MLA = MLASpec(1536, 512, 128, 64, 128)          # DeepSeek-V3 config.json


def mla_attention():
    ops, _ = mla_ops(4096, 7168, 128, MLA, causal=True)
    return next(op for op in ops if op.kind == "attention")


def test_the_mla_attention_op_carries_its_query_key_and_value_head_dims():
    assert mla_attention().head_dims == (192, 128)


@pytest.mark.parametrize("backward", [False, True])
def test_the_modelled_speed_of_192_128_heads_on_blackwell_is_the_measured_ratio(backward):
    # Dao-AILab/flash-attention PRs #2270 and #2280, FA4 on B200, causal, seqlen 8192:
    # 192/128 fwd 1494.1, bwd 971.1 TFLOPS; 128/128 fwd 1418.1, bwd (2-CTA) 1208.6 TFLOPS.
    measured = (1494.1 / 1418.1) if not backward else (971.1 / 1208.6)
    gpu = get_gpu("b200")
    op = mla_attention()
    standard = replace(op, head_dims=None)
    ratio = attention_time_s(standard, gpu, "bf16", 1, "flash", backward) / \
        attention_time_s(op, gpu, "bf16", 1, "flash", backward)
    assert ratio == pytest.approx(measured, rel=1e-3)


def test_no_measurement_no_change():
    gpu = get_gpu("h100-sxm")
    op = mla_attention()
    assert attention_time_s(op, gpu, "bf16", 1, "flash", True) == \
        attention_time_s(replace(op, head_dims=None), gpu, "bf16", 1, "flash", True)
    assert head_dim_factor((128, 128), "blackwell") == 1.0


def test_every_measured_factor_is_a_positive_ratio_of_two_throughputs():
    for shapes in MEASURED_RELATIVE.values():
        for forward, backward in shapes.values():
            assert 0 < forward < 2 and 0 < backward < 2
