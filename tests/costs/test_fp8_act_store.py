"""Megatron-Core's activation_func_fp8_input_store (training.fp8_activation_input_store; costs/fp8_act_store.py):
the SwiGLU's input, gate and up side by side, kept in FP8 for backward and cast back before it."""

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.setup import memory_of, prepare, step_time_of
from scalesim.cli import main
from scalesim.costs.compute import layer_time
from scalesim.costs.finetune import FinetuneSpec, finetune_layer_time
from scalesim.costs.fp8_act_store import FP8_ACT_STORE_OP, with_fp8_activation_store
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer
from scalesim.scenario import load_scenario

SEQ = 4096


def _scenario(tmp_path, store, *, tp=1, sp=False, model="llama2-7b", precision="fp8", extra=None, **parallel):
    data = {"name": "act-store", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": model,
            "training": {"precision": precision, "seq_len": SEQ, "global_batch": 16, "micro_batch": 2,
                         "saved_activations": "transformer-engine", "fp8_activation_input_store": store,
                         **(extra or {})},
            "parallel": {"tp": tp, "dp": 8 // tp, "sequence_parallel": sp, **parallel}}
    path = tmp_path / f"s-{store}-{tp}-{sp}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _setup(path):
    scenario, file = load_scenario(path)
    return prepare(scenario, file)


def _swiglu_input_bytes_16bit(model_name, micro_batch):
    """Every block's linear_fc1 output (gate and up, s x 2f) in 16-bit, from the model's own shapes."""
    model = get_model(model_name, seq_len=SEQ)
    blocks = [layer for layer in model.layers if layer.kind == "transformer_block"]
    gate = next(op for op in blocks[0].ops if op.name == "mlp_gate")
    s, f, _ = gate.gemm_mnk
    return len(blocks) * 2.0 * s * 2 * f * micro_batch


def test_storing_the_swiglu_input_in_fp8_halves_that_tensor_and_nothing_else(tmp_path):
    off, on = (memory_of(_setup(_scenario(tmp_path, store))) for store in (False, True))
    assert off.activations - on.activations == pytest.approx(_swiglu_input_bytes_16bit("llama2-7b", 2) / 2, rel=1e-6)
    assert (on.weights, on.gradients, on.optimizer) == (off.weights, off.gradients, off.optimizer)


@pytest.mark.parametrize("tp, sp, extra", [(2, True, {}), (4, False, {}), (1, False, {"activation_checkpointing": "full"}),
                                           (1, False, {"finetune": "lora"})])
def test_the_peak_never_rises_and_the_step_never_gets_faster(tmp_path, tp, sp, extra):
    off, on = (_setup(_scenario(tmp_path, store, tp=tp, sp=sp, extra=extra)) for store in (False, True))
    assert memory_of(on).total <= memory_of(off).total
    assert step_time_of(on) >= step_time_of(off)


def test_the_casts_cost_time_in_both_passes(tmp_path):
    off, on = (_setup(_scenario(tmp_path, store)) for store in (False, True))
    assert step_time_of(on) > step_time_of(off)


def test_the_casts_split_with_the_ffn_columns():
    model = with_fp8_activation_store(get_model("llama2-7b", seq_len=SEQ), True)
    block = next(layer for layer in model.layers if layer.kind == "transformer_block")
    cast = lambda layer: next(op.elements_moved for op in layer.ops if op.name == FP8_ACT_STORE_OP)  # noqa: E731
    swiglu = lambda layer: next(op.elements_moved for op in layer.ops if op.name == "swiglu")  # noqa: E731
    assert cast(shard_layer(block, 4, 1, True)) / cast(block) == pytest.approx(swiglu(shard_layer(block, 4, 1, True))
                                                                               / swiglu(block))


@pytest.mark.parametrize("model, precision, extra, words", [
    ("llama2-7b", "bf16", {}, "training.precision: fp8"),
    ("gpt3-1.3b", "fp8", {"seq_len": 2048}, "no SwiGLU"),
    ("llama2-7b", "fp8", {"elementwise_kernels": "eager"}, "elementwise_kernels fused"),
])
def test_the_store_is_refused_where_megatron_core_has_no_such_store(tmp_path, model, precision, extra, words):
    path = _scenario(tmp_path, True, model=model, precision=precision, extra=extra)
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 2, result.output
    assert "training.fp8_activation_input_store" in result.output and words in result.output
    assert str(path) in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("lora", [False, True])
def test_the_cast_back_moves_as_many_bytes_as_the_cast(lora):
    model = get_model("llama2-7b", seq_len=SEQ)
    off, on = (next(layer for layer in m.layers if layer.kind == "transformer_block")
               for m in (model, with_fp8_activation_store(model, True)))
    gpu = get_gpu("h100-sxm")
    if lora:
        spec = FinetuneSpec("lora", 16, ("q", "k", "v", "o"), layout="megatron")
        t_off, t_on = (finetune_layer_time(b, gpu, "fp8", 1, spec) for b in (off, on))
    else:
        t_off, t_on = (layer_time(b, gpu, "fp8", 1) for b in (off, on))
    assert t_on.forward_s > t_off.forward_s
    assert t_on.backward_s - t_off.backward_s == pytest.approx(t_on.forward_s - t_off.forward_s, rel=1e-9)


def test_a_frozen_linears_fp8_input_copy_is_freed_once(tmp_path):
    # LoRA on q, k, v, o only: the MLP's frozen linears keep no input in either style, so Transformer Engine's
    # fp8 copies save only on the attention's two adapted inputs (qkv's and the projection's, s x h each)
    from scalesim.costs.memory import FP8_SAVED_BYTES
    lora = {"finetune": "lora", "lora": {"targets": "attention", "layout": "megatron"}}
    for style in ("megatron", "transformer-engine"):
        (tmp_path / style).mkdir()
    megatron, te = (memory_of(_setup(_scenario(tmp_path / style, False, extra={**lora, "saved_activations": style})))
                    for style in ("megatron", "transformer-engine"))
    model = get_model("llama2-7b", seq_len=SEQ)
    blocks = sum(layer.kind == "transformer_block" for layer in model.layers)
    kept_inputs = 2 * SEQ * model.hidden * blocks * 2          # two s x h inputs a block, micro-batch 2
    assert megatron.activations - te.activations == pytest.approx((2 - FP8_SAVED_BYTES) * kept_inputs, rel=1e-6)
