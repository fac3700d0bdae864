"""FP8 under sequence parallelism: a column-parallel GEMM's input is cast once, on the local shard,
before the FP8 all-gather (torchao PrepareFloat8ModuleInput; Transformer Engine LayerNormLinear)."""

import pytest

from scalesim.costs.compute import layer_time, op_time_s
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer


def _shares(layer):
    return {op.name: op.cast_share for op in layer.ops if op.gemm_mnk is not None}


def test_sequence_parallel_casts_the_gathered_input_once_on_the_local_shard():
    block = get_model("llama3-8b", seq_len=1024).layers[1]
    shares = _shares(shard_layer(block, 8, 1, True))
    assert shares["qkv"] == pytest.approx(1 / 8) and shares["mlp_gate"] == pytest.approx(1 / 8)
    assert shares["mlp_up"] == 0.0                      # reads the gate's FP8 input
    assert shares["attn_out"] == shares["mlp_down"] == 1.0   # their input is local already


def test_without_sequence_parallelism_every_gemm_casts_its_whole_input_and_fc1_once():
    block = get_model("llama3-8b", seq_len=1024).layers[1]
    for layer in (shard_layer(block, 8, 1, False), block):
        shares = _shares(layer)
        assert shares.pop("mlp_up") == 0.0          # TE's linear_fc1 is one GEMM: gate and up share one cast
        assert set(shares.values()) == {1.0}


def test_a_gelu_mlp_casts_its_up_projection_input_itself():
    block = get_model("gpt3-1.3b", seq_len=1024).layers[1]
    shares = _shares(shard_layer(block, 4, 1, True))
    assert shares["mlp_up"] == pytest.approx(1 / 4)


def test_the_shared_cast_shortens_fp8_blocks_only():
    h100 = get_gpu("h100-sxm")
    block = get_model("llama3-70b", seq_len=8192).layers[1]
    with_sp, without = shard_layer(block, 8, 1, True), shard_layer(block, 8, 1, False)
    assert layer_time(with_sp, h100, "fp8", 2).forward_s < layer_time(without, h100, "fp8", 2).forward_s
    up = {op.name: op for op in with_sp.ops}["mlp_up"]
    plain = {op.name: op for op in without.ops}["mlp_up"]
    assert op_time_s(up, h100, "bf16", 2) == op_time_s(plain, h100, "bf16", 2)
