"""NeMo 25.09's Transformer Engine op fuser and fused QKV + RoPE kernel (training.te_op_fuser,
training.fused_qkv_rope; costs/te_ops.py): kernels the switches remove, never a slower step, defaults kept."""

from dataclasses import replace

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.setup import memory_of, prepare, step_time_of
from scalesim.cli import main
from scalesim.costs.adapters import OP_FUSED_AWAY, adapter_ops, adapter_shapes
from scalesim.costs.finetune import finetune_layer_time, finetune_spec
from scalesim.costs.host import layer_kernels
from scalesim.costs.te_ops import fused_qkv_rope_model, op_fuser_saved_s
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.scenario import load_scenario
from scalesim.scenario.training import TrainingSpec

SEQ = 4096
LORA = {"finetune": "lora", "lora": {"rank": 16, "targets": "attention", "layout": "megatron", "dropout": 0.1}}


def _scenario(tmp_path, *, model="mistral-7b", precision="fp8", tp=1, keys=None, extra=None, name="s"):
    training = {"precision": precision, "seq_len": SEQ, "global_batch": 8, "micro_batch": 1,
                "saved_activations": "transformer-engine" if precision == "fp8" else "megatron", **LORA,
                **(extra or {}), **(keys or {})}
    data = {"name": "te-ops", "cluster": {"node": "hgx-b200", "gpus": 8}, "model": model, "training": training,
            "parallel": {"tp": tp, "dp": 8 // tp}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _setup(path):
    scenario, file = load_scenario(path)
    return prepare(scenario, file)


def _block(model_name="mistral-7b"):
    return next(layer for layer in get_model(model_name, seq_len=SEQ).layers if layer.kind == "transformer_block")


def test_both_switches_default_off():
    spec = TrainingSpec(seq_len=SEQ, global_batch=8)
    assert spec.te_op_fuser is False and spec.fused_qkv_rope is False


def test_leaving_the_keys_out_is_setting_them_false(tmp_path):
    absent = _setup(_scenario(tmp_path, name="absent"))
    off = _setup(_scenario(tmp_path, keys={"te_op_fuser": False, "fused_qkv_rope": False}, name="off"))
    assert step_time_of(absent) == step_time_of(off)
    assert memory_of(absent).total == memory_of(off).total


@pytest.mark.parametrize("model, precision, tp, keys", [
    ("mistral-7b", "fp8", 1, {"te_op_fuser": True}),
    ("mistral-7b", "fp8", 1, {"fused_qkv_rope": True}),
    ("mistral-7b", "fp8", 1, {"te_op_fuser": True, "fused_qkv_rope": True}),
    ("llama2-7b", "bf16", 1, {"te_op_fuser": True, "fused_qkv_rope": True}),     # no GQA, no FP8 casts
    ("mistral-7b", "fp8", 2, {"te_op_fuser": True}),                            # adapters unfused at TP 2
])
def test_the_switches_never_make_a_step_slower(tmp_path, model, precision, tp, keys):
    off = _setup(_scenario(tmp_path, model=model, precision=precision, tp=tp, name="off"))
    on = _setup(_scenario(tmp_path, model=model, precision=precision, tp=tp, keys=keys, name="on"))
    assert step_time_of(on) <= step_time_of(off)
    assert memory_of(on).total <= memory_of(off).total


def test_the_op_fuser_makes_a_grouped_query_fp8_lora_step_faster(tmp_path):
    off = _setup(_scenario(tmp_path, name="off"))
    on = _setup(_scenario(tmp_path, keys={"te_op_fuser": True}, name="on"))
    assert step_time_of(on) < step_time_of(off)


def test_the_fused_adapters_launch_fewer_kernels_and_none_of_the_fused_ones():
    block = _block()
    unfused, fused = (finetune_spec(get_model("mistral-7b", seq_len=SEQ), "lora", 16, "attention", "megatron",
                                    0.1, te_op_fuser=on) for on in (False, True))
    for shape in adapter_shapes(block, fused):
        before, after = adapter_ops(shape, unfused, 1), adapter_ops(shape, fused, 1)
        for ops_before, ops_after in zip(before, after):
            assert len(ops_after) < len(ops_before)
            assert {op.name for op in ops_before} - {op.name for op in ops_after} <= set(OP_FUSED_AWAY)
            assert not {op.name for op in ops_after} & set(OP_FUSED_AWAY)
        # the GEMMs stay: the op fuser runs the scale and the adds inside them
        assert [op.name for op in after[0] if op.kind == "gemm"] == [op.name for op in before[0] if op.kind == "gemm"]


def test_nemo_fuses_the_adapters_at_tensor_parallelism_one_only():
    model = get_model("mistral-7b", seq_len=SEQ)
    plain, fused_tp2 = (finetune_spec(model, "lora", 16, "attention", "megatron", 0.1, tp=2, te_op_fuser=on)
                        for on in (False, True))
    shape = adapter_shapes(_block(), plain)[0]
    assert adapter_ops(shape, fused_tp2, 1) == adapter_ops(shape, plain, 1)


def test_te_dropout_keeps_a_bit_mask(tmp_path):
    off = _setup(_scenario(tmp_path, name="off"))
    on = _setup(_scenario(tmp_path, keys={"te_op_fuser": True}, name="on"))
    assert memory_of(on).activations < memory_of(off).activations
    assert memory_of(on).weights == memory_of(off).weights


def test_the_removed_casts_are_fp8_only():
    block, gpu = _block(), get_gpu("b200")
    spec = finetune_spec(get_model("mistral-7b", seq_len=SEQ), "lora", 16, "attention", "megatron", 0.1,
                         te_op_fuser=True)
    fwd8, bwd8 = op_fuser_saved_s(block, gpu, "fp8", 1, spec)
    fwd16, bwd16 = op_fuser_saved_s(block, gpu, "bf16", 1, spec)
    assert fwd8 > 0 and bwd8 > 0
    assert fwd16 < 0 and bwd16 < 0        # in 16 bits only the beta = 1 reads are left ...
    t_off = finetune_layer_time(block, gpu, "bf16", 1, replace(spec, te_op_fuser=False))
    t_on = finetune_layer_time(block, gpu, "bf16", 1, spec)
    assert t_on.forward_s < t_off.forward_s and t_on.backward_s < t_off.backward_s   # ... less than the kernels gone


def test_the_fused_rope_is_one_kernel_each_way_over_q_k_and_v():
    model = get_model("mistral-7b", seq_len=SEQ)
    block, fused = _block(), next(layer for layer in fused_qkv_rope_model(model).layers
                                  if layer.kind == "transformer_block")
    rope = next(op for op in fused.ops if op.name == "rope")
    m, n, _ = next(op for op in block.ops if op.name == "qkv").gemm_mnk
    assert rope.elements_moved == rope.backward_elements == 2 * m * n     # reads qkv, writes q, k, v
    assert layer_kernels(fused, "flash") == layer_kernels(block, "flash")
    gpu = get_gpu("b200")
    spec = finetune_spec(model, "lora", 16, "attention", "megatron", 0.1)
    before, after = (finetune_layer_time(b, gpu, "fp8", 1, spec) for b in (block, fused))
    assert after.forward_s + after.backward_s < before.forward_s + before.backward_s   # grouped-query attention


@pytest.mark.parametrize("keys, extra, words", [
    ({"te_op_fuser": True}, {"finetune": "none"}, "finetune lora"),
    ({"te_op_fuser": True}, {"lora": {"layout": "peft"}}, "lora.layout megatron"),
    ({"fused_qkv_rope": True}, {"elementwise_kernels": "eager"}, "elementwise_kernels fused"),
    # torchao's Float8Linear casts its own way: no Transformer Engine op to fuse (review13b)
    ({"te_op_fuser": True}, {"fp8_recipe": "torchao-tensorwise", "saved_activations": "megatron"}, "fp8_recipe"),
    # TE's own other recipes: refused as not modelled, not as "not Transformer Engine" (review13c)
    ({"te_op_fuser": True}, {"fp8_recipe": "transformer-engine-current"}, "modelled for TE's delayed scaling"),
])
def test_the_switches_are_refused_where_the_code_has_no_such_path(tmp_path, keys, extra, words):
    path = _scenario(tmp_path, keys=keys, extra=extra)
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 2, result.output
    key = next(iter(keys))
    assert f"training.{key}" in result.output and words in result.output
    assert str(path) in result.output and "Traceback" not in result.output


def test_fused_qkv_rope_needs_a_rope_model(tmp_path):
    path = _scenario(tmp_path, model="gpt3-1.3b", keys={"fused_qkv_rope": True}, extra={"seq_len": 2048})
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 2 and "training.fused_qkv_rope" in result.output, result.output


def test_fused_qkv_rope_is_refused_with_separate_q_k_v_projections(tmp_path):
    # Megatron-Core's fused_single_qkv_rope splits linear_qkv's one output; torchtitan's wq, wk, wv have none
    path = _scenario(tmp_path, keys={"fused_qkv_rope": True}, extra={"fused_projections": False})
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 2, result.output
    assert "training.fused_qkv_rope" in result.output and "fused_projections true" in result.output
    assert "Traceback" not in result.output
