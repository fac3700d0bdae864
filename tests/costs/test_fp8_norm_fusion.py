"""Transformer Engine's norm writing linear_qkv's and linear_fc1's FP8 inputs under delayed scaling
(costs/fp8_norm_fusion.py): no cast kernel, the norm's write halved, a transpose of its own on TN-only GPUs."""

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, fp8_cast_s, layer_time, streaming_bw_bytes_per_s
from scalesim.costs.float8_casts import with_fp8_recipe
from scalesim.costs.fp8_grad_casts import backward_cast_bytes
from scalesim.costs.fp8_norm_fusion import norm_fused_model, norm_outputs_asked
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer

B200 = get_gpu("b200")


def _layers(model, recipe, precision="fp8", seq=1024):
    return with_fp8_recipe(get_model(model, seq_len=seq), recipe, precision).layers


def _block(model="llama2-70b", recipe="transformer-engine"):
    return next(layer for layer in _layers(model, recipe) if layer.kind == "transformer_block")


def _ops(layer):
    return {op.name: op for op in layer.ops}


def test_delayed_scaling_runs_no_cast_kernel_for_the_inputs_a_norm_writes():
    fused, plain = _ops(_block()), _ops(get_model("llama2-70b", seq_len=1024).layers[1])
    for name in ("qkv", "mlp_gate"):
        assert fused[name].fp8_norm_input and not plain[name].fp8_norm_input
        s, _, h = fused[name].gemm_mnk
        # no kernel: the norm writes FP8, one byte an element less than its 16-bit output
        assert fp8_cast_s(fused[name], B200, 1) == pytest.approx(-s * h / streaming_bw_bytes_per_s(B200))
        assert fp8_cast_s(plain[name], B200, 1) > KERNEL_OVERHEAD_S
    for name in ("attn_out", "mlp_down"):        # fed by attention and the SwiGLU: cast as before
        assert fp8_cast_s(fused[name], B200, 1) == fp8_cast_s(plain[name], B200, 1)


def test_the_blocks_forward_is_faster_by_the_two_casts_and_a_byte_of_each_norm_write():
    fused, plain = _block(), get_model("llama2-70b", seq_len=1024).layers[1]
    s, _, h = _ops(plain)["qkv"].gemm_mnk
    saved = layer_time(plain, B200, "fp8", 1).forward_s - layer_time(fused, B200, "fp8", 1).forward_s
    stream = streaming_bw_bytes_per_s(B200)
    assert saved == pytest.approx(2 * ((2 + 1) * s * h / stream + KERNEL_OVERHEAD_S) + 2 * s * h / stream)


def test_on_tn_only_gpus_the_norm_written_input_is_transposed_by_a_kernel_of_its_own():
    fused, plain = _ops(_block())["qkv"], _ops(get_model("llama2-70b", seq_len=1024).layers[1])["qkv"]
    s, _, h = plain.gemm_mnk
    # Hopper: read 1 + write 1 of the input, where the cast wrote its copy at 1 byte; Blackwell: no copy either way
    assert backward_cast_bytes(fused, False) - backward_cast_bytes(plain, False) == s * h * (2 - 1)
    assert backward_cast_bytes(fused, True) == backward_cast_bytes(plain, True)
    # under sequence parallelism the gathered input is transposed either way (rowwise-only FP8 gather)
    sp_fused = _ops(shard_layer(_block(), 8, 1, True))["qkv"]
    sp_plain = _ops(shard_layer(get_model("llama2-70b", seq_len=1024).layers[1], 8, 1, True))["qkv"]
    assert backward_cast_bytes(sp_fused, False) == backward_cast_bytes(sp_plain, False)


@pytest.mark.parametrize("recipe", ["transformer-engine-current", "transformer-engine-mxfp8", "torchao-tensorwise"])
def test_other_recipes_keep_the_cast_kernel(recipe):
    # current scaling: the norm writes 16 bits + amax, then quantize_with_amax; MXFP8: norm, then quantize
    assert not any(op.fp8_norm_input for layer in _layers("llama2-70b", recipe) for op in layer.ops)
    assert not any(op.fp8_norm_input for layer in _layers("llama2-70b", "transformer-engine", "bf16")
                   for op in layer.ops)


def test_moe_and_mla_blocks_fuse_only_what_a_norm_feeds_directly():
    marked = {op.name for layer in _layers("deepseek-v3", "transformer-engine", seq=256) for op in layer.ops
              if op.fp8_norm_input}
    assert not any(name.startswith(("expert", "shared", "mla")) for name in marked)


def test_an_adapter_on_the_block_input_brings_the_cast_back():
    block = _block()
    qkv_adapter = [("qkv", 1024, 8192, 10240)]
    back = _ops(norm_outputs_asked(block, qkv_adapter))
    assert not back["qkv"].fp8_norm_input and back["mlp_gate"].fp8_norm_input
    assert norm_outputs_asked(block, [("o", 1024, 8192, 8192)]) is block


def test_norm_fused_model_leaves_post_norm_blocks():
    bert = norm_fused_model(get_model("bert-large", seq_len=128))
    assert not any(op.fp8_norm_input for layer in bert.layers for op in layer.ops)
