"""Transformer Engine's FP8 current scaling (costs/fp8_current_scaling.py): each cast tensor read once more by
an amax pass of its own, except the inputs a TE norm writes with their amax; delayed scaling unchanged."""

from dataclasses import replace

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.costs.compute import KERNEL_OVERHEAD_S, fp8_cast_s, fp8_grad_cast_s, streaming_bw_bytes_per_s
from scalesim.costs.float8_casts import with_fp8_recipe
from scalesim.costs.fp8_current_scaling import AMAX_KERNELS, NORM_FED
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer

GPUS = (get_gpu("b200"), get_gpu("h100-sxm"))


def _block(recipe, tp=1):
    model = get_model("llama3-8b", seq_len=2048)      # recipe None: TE's tensorwise casts, each a kernel of its own
    model = model if recipe is None else with_fp8_recipe(model, recipe, "fp8")
    block = next(layer for layer in model.layers if layer.kind == "transformer_block")
    return shard_layer(block, tp, 1, tp > 1)


@pytest.mark.parametrize("tp", [1, 4])
def test_the_amax_pass_reads_each_cast_tensor_exactly_once_more(tp):
    delayed, current = _block(None, tp), _block("transformer-engine-current", tp)
    gemms = [(d, c) for d, c in zip(delayed.ops, current.ops) if d.gemm_mnk is not None and d.grad_cast_share > 0]
    assert len(gemms) >= 4
    for gpu in GPUS:
        stream = streaming_bw_bytes_per_s(gpu)
        for d, c in gemms:
            m, n, k = d.gemm_mnk
            # forward: the input (on the share the GEMM casts), 2 bytes an element, in kernels of its own;
            # nothing where the norm wrote the amax
            passes = d.name not in NORM_FED and d.cast_share > 0
            extra_in = 3 * m * k * d.cast_share * 2 / stream + AMAX_KERNELS * KERNEL_OVERHEAD_S if passes else 0.0
            assert fp8_cast_s(c, gpu, 3) - fp8_cast_s(d, gpu, 3) == pytest.approx(extra_in, abs=1e-15)
            # backward: the output gradient, always TE's own quantize
            extra_grad = 3 * m * n * d.grad_cast_share * 2 / stream + AMAX_KERNELS * KERNEL_OVERHEAD_S
            assert fp8_grad_cast_s(c, gpu, 3) - fp8_grad_cast_s(d, gpu, 3) == pytest.approx(extra_grad)


def test_delayed_scaling_and_16_bit_runs_are_unchanged():
    model = get_model("llama3-8b", seq_len=2048)
    delayed = with_fp8_recipe(model, "transformer-engine", "fp8")      # only the norm-written inputs marked
    assert [[replace(op, fp8_norm_input=False) for op in layer.ops] for layer in delayed.layers] == \
        [list(layer.ops) for layer in model.layers]
    assert with_fp8_recipe(model, "transformer-engine-current", "bf16") is model
    ops = [op for layer in model.layers for op in layer.ops]
    assert not any(op.fp8_amax_input or op.fp8_amax_grad for op in ops)
    # the ops that cast nothing (the LM head) get no amax pass under current scaling either
    current = [op for layer in with_fp8_recipe(model, "transformer-engine-current", "fp8").layers for op in layer.ops]
    assert all(not (op.fp8_amax_input or op.fp8_amax_grad) for op in current if op.name == "lm_head")


@pytest.mark.parametrize("training", [{"precision": "fp8", "fp8_recipe": "tensorwise"},
                                      {"precision": "bf16", "fp8_recipe": "transformer-engine-current"}])
def test_a_bad_recipe_exits_2_naming_the_key(tmp_path, training):
    result = _run_8x_h100(tmp_path, training)
    assert result.exit_code == 2 and "training.fp8_recipe" in result.output and "Traceback" not in result.output


def _run_8x_h100(tmp_path, training):
    """`scalesim run` on Llama 2 7B, dp 8 on a DGX H100, with these `training` keys."""
    data = {"name": "bad", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "llama2-7b",
            "training": {"seq_len": 1024, "global_batch": 8, **training}, "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return CliRunner().invoke(main, ["run", str(path), "--no-plots"])


def _passes(amax_fused):
    model = with_fp8_recipe(get_model("llama3-8b", seq_len=2048), "transformer-engine-current", "fp8", amax_fused)
    ops = [op for layer in model.layers for op in layer.ops if op.gemm_mnk is not None and op.name != "lm_head"]
    return {op.name for op in ops if op.fp8_amax_input}, {op.name for op in ops if op.fp8_amax_grad}


def test_a_producer_that_writes_the_amax_removes_the_pass_of_the_tensor_it_writes():
    model = get_model("llama3-8b", seq_len=2048)
    ops = [op for layer in model.layers for op in layer.ops if op.gemm_mnk is not None and op.name != "lm_head"]
    cast = {op.name for op in ops if op.cast_share > 0}           # gate and up share one cast input
    every = {op.name for op in ops if op.grad_cast_share > 0}
    assert {"qkv", "attn_out", "mlp_down"} <= cast and {"qkv", "attn_out", "mlp_up", "mlp_down"} <= every
    assert _passes(()) == (cast, every)                           # cuDNN norms, Megatron's SwiGLU: every cast
    inputs, grads = _passes(("norm",))                            # TE's norms write linear_qkv's / linear_fc1's
    assert inputs == cast - set(NORM_FED) and grads == every
    inputs, grads = _passes(("norm", "activation"))               # TE's SwiGLU writes fc2's input, fc1's gradient
    assert inputs == {"attn_out"} and grads == every - {"mlp_gate", "mlp_up"}


@pytest.mark.parametrize("training", [
    {"precision": "fp8", "fp8_recipe": "transformer-engine-current", "fp8_amax_fused": ["cudnn"]},
    {"precision": "fp8", "fp8_amax_fused": []},
    # fuzz15: a producer named twice ran at exit 0
    {"precision": "fp8", "fp8_recipe": "transformer-engine-current", "fp8_amax_fused": ["norm", "norm"]}])
def test_a_bad_amax_producer_exits_2_naming_the_key(tmp_path, training):
    result = _run_8x_h100(tmp_path, training)
    assert result.exit_code == 2 and "training.fp8_amax_fused" in result.output and "Traceback" not in result.output
