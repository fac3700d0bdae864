"""torchao's dynamic tensorwise float8 casts (costs/float8_casts.py): a cast pass per tensor (its amax fused
into the kernel that produces it), the output gradients cast in backward, float8 all-gathered tensors
transposed for the weight gradient."""

from dataclasses import replace

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.costs.compute import layer_time
from scalesim.costs.float8_casts import FLOAT8_SP_SPLIT, FUSED_TWO_LAYOUT_BYTES, OP_BYTES, with_fp8_recipe
from scalesim.costs.fp8_grad_casts import backward_cast_bytes
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer, split_attention_mlp

H100 = get_gpu("h100-sxm")


def _block(recipe, precision="fp8", model="llama3-8b"):
    m = with_fp8_recipe(get_model(model, seq_len=8192), recipe, precision)
    return next(layer for layer in m.layers if layer.kind == "transformer_block")


def _casts(layer):
    return {op.name: op.elements_moved for op in layer.ops if op.name.startswith("fp8_")}


def test_16_bit_and_transformer_engine_models_are_left_as_they_are():
    plain = _block("transformer-engine", "fp8")
    assert _block("torchao-tensorwise", "bf16") == _block("transformer-engine", "bf16")
    raw = next(layer for layer in get_model("llama3-8b", seq_len=8192).layers if layer.kind == "transformer_block")
    # Transformer Engine adds no cast ops: its casts are the GEMMs' own; only the norm-written inputs are marked
    assert not _casts(plain) and [replace(op, fp8_norm_input=False) for op in plain.ops] == list(raw.ops)


def test_torchao_gemms_cast_nothing_themselves_and_every_gradient_is_cast():
    block = _block("torchao-tensorwise")
    assert {op.cast_share for op in block.ops if op.gemm_mnk is not None} == {0.0}
    gate_up = sum(op.gemm_mnk[0] * op.gemm_mnk[1] for op in block.ops if op.name in ("mlp_gate", "mlp_up"))
    assert _casts(block)["fp8_grad_mlp_cols"] * OP_BYTES == pytest.approx(FUSED_TWO_LAYOUT_BYTES * gate_up)
    assert all(op.backward_only for op in block.ops if op.name.startswith(("fp8_grad", "fp8_transpose")))


def test_casts_shard_with_their_tensors():
    block = _block("torchao-tensorwise")
    whole, sp, no_sp = _casts(block), _casts(shard_layer(block, 8, 1, True)), _casts(shard_layer(block, 8, 1, False))
    assert sp["fp8_cast_attn"] == pytest.approx(whole["fp8_cast_attn"] / 8)      # cast on the sequence shard
    assert no_sp["fp8_cast_attn"] == pytest.approx(whole["fp8_cast_attn"])       # the replicated input, whole
    assert sp["fp8_grad_mlp_cols"] == no_sp["fp8_grad_mlp_cols"] == pytest.approx(whole["fp8_grad_mlp_cols"] / 8)
    assert sp["fp8_transpose_mlp"] == pytest.approx(whole["fp8_transpose_mlp"])   # the gathered tensor, whole
    attention, mlp = split_attention_mlp(shard_layer(block, 8, 1, True))
    assert {n for n in _casts(attention)} == {"fp8_cast_attn", "fp8_grad_attn", "fp8_cast_attn_heads",
                                             "fp8_grad_attn_heads", "fp8_transpose_attn"}
    assert all(n.endswith(("mlp", "mlp_cols")) for n in _casts(mlp))


def test_both_recipes_cast_the_same_tensors_forward_and_backward():
    # TE's casts each a kernel of its own (the model unmarked: no norm writing FP8, fp8_norm_fusion.py)
    te, ao = shard_layer(_block("transformer-engine", "bf16"), 8, 1, True), shard_layer(_block("torchao-tensorwise"), 8, 1, True)
    t_te, t_ao = layer_time(te, H100, "fp8", 2, "selective-op"), layer_time(ao, H100, "fp8", 2, "selective-op")
    assert t_ao.forward_s == pytest.approx(t_te.forward_s, rel=0.02)     # one cast pass per input either way
    # backward: the same gradients cast and transposed; the two all-gathered FP8 tensors of each half (the block
    # input, wo's / w2's gradient) Transformer Engine transposes in a kernel of its own (read 1, write 1), where
    # torchtitan writes the second layout in the copy out of NCCL's buffer (1 byte): 4 s h bytes more a block
    te_bytes = sum(backward_cast_bytes(op, False) for op in te.ops if op.gemm_mnk is not None)
    ao_bytes = OP_BYTES * sum(op.elements_moved if op.backward_only else op.backward_elements
                              for op in ao.ops if op.name.startswith("fp8_"))
    s, _, h = next(op for op in te.ops if op.name == "qkv").gemm_mnk
    assert te_bytes - ao_bytes == pytest.approx(4 * s * h)
    assert t_ao.recompute_s > t_te.recompute_s          # every forward cast re-runs, not only the even mms'


def test_the_casts_made_before_a_gather_split_under_sequence_parallelism():
    block = _block("torchao-tensorwise")
    sp = _casts(shard_layer(block, 4, 1, True))
    assert all(sp[name] == pytest.approx(_casts(block)[name] / 4) for name in FLOAT8_SP_SPLIT)


def test_a_torchao_recipe_needs_fp8(tmp_path):
    data = {"name": "bad", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "llama2-7b",
            "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "fp8_recipe": "torchao-tensorwise"},
            "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "training.fp8_recipe" in result.output and "Traceback" not in result.output


def test_the_recipes_docs_describe_the_cast_the_model_counts():
    # The cast reads 2 bytes and writes 1 an element: its amax is the producing kernel's (torchao's roofline
    # for compiled code), no pass of its own; the key's docs said "an amax pass before each cast" after it
    # was fused (636ffdd)
    from pathlib import Path

    from scalesim.costs.float8_casts import CAST_BYTES
    assert CAST_BYTES == 2.0 + 1.0
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/contract-additions.md", "scalesim/scenario/training.py"):
        text = " ".join((root / doc).read_text().split())
        assert "fp8_recipe" in text and "amax pass before" not in text, doc
