"""The output layer at the 16-bit rate in an FP8 run (models/transformer.py lm_head, `fp8_excluded`): Megatron-Core's
output layer is no Transformer Engine module, torchtitan's float8 converter skips it."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import fp8_cast_s, fp8_grad_cast_s, layer_time
from scalesim.hardware import get_gpu
from scalesim.models import get_model

B200, H100 = get_gpu("b200"), get_gpu("h100-sxm")


@pytest.mark.parametrize("gpu", [B200, H100])
def test_the_output_layer_runs_at_the_16_bit_rate_in_an_fp8_recipe(gpu):
    head = next(layer for layer in get_model("llama3-8b", seq_len=8192).layers if layer.name == "lm_head")
    fp8, bf16 = layer_time(head, gpu, "fp8", 1), layer_time(head, gpu, "bf16", 1)
    assert fp8.forward_s == bf16.forward_s and fp8.backward_s == bf16.backward_s
    as_fp8 = replace(head, ops=tuple(replace(op, fp8_excluded=False) for op in head.ops))
    assert layer_time(as_fp8, gpu, "fp8", 1).forward_s < fp8.forward_s       # what it was priced at before
    assert fp8_cast_s(head.ops[0], gpu, 1) == fp8_grad_cast_s(head.ops[0], gpu, 1) == 0.0


def test_the_blocks_gemms_still_run_at_the_fp8_rate():
    block = get_model("llama3-8b", seq_len=8192).layers[1]
    assert not any(op.fp8_excluded for op in block.ops)
    assert layer_time(block, B200, "fp8", 1).matmul_forward_s < layer_time(block, B200, "bf16", 1).matmul_forward_s
