"""What Transformer Engine's MXFP8 adds to its casts: each copy's scales and the scale swizzles before every GEMM
(costs/fp8_grad_casts.py)."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, fp8_cast_s, fp8_grad_cast_s, streaming_bw_bytes_per_s
from scalesim.costs.fp8_grad_casts import backward_cast_bytes, mxfp8_model
from scalesim.hardware import get_gpu
from scalesim.models import get_model

B200 = get_gpu("b200")


def test_mxfp8_casts_write_their_scales_and_each_gemm_swizzles_both_operands_scales():
    model = get_model("llama2-70b", seq_len=1024)
    plain = model.layers[1]
    mx = mxfp8_model(replace(model, layers=(plain,))).layers[0]
    stream = streaming_bw_bytes_per_s(B200)
    checked = 0
    for te, op in zip(plain.ops, mx.ops):
        if op.gemm_mnk is None or op.cast_share <= 0:
            continue
        m, _, k = op.gemm_mnk
        # forward: the scales of both copies (a byte per 32 elements each), the two swizzles before the GEMM
        extra = m * k * 2 / 32 / stream + 2 * KERNEL_OVERHEAD_S
        assert fp8_cast_s(op, B200, 1) - fp8_cast_s(te, B200, 1) == pytest.approx(extra)
        # backward: the gradient's cast and two swizzles before each of the data- and weight-gradient GEMMs
        kernels = fp8_grad_cast_s(op, B200, 1) - backward_cast_bytes(op, True) / stream
        assert kernels == pytest.approx(5 * KERNEL_OVERHEAD_S)
        # without a weight gradient (LoRA's frozen base) the data-gradient GEMM's two only
        frozen = fp8_grad_cast_s(op, B200, 1, weight_gradient=False) - backward_cast_bytes(op, True, False) / stream
        assert frozen == pytest.approx(3 * KERNEL_OVERHEAD_S)
        checked += 1
    assert checked == 4         # qkv, attn_out, fc1 (gate; up casts nothing of its own), fc2
