"""Eager PyTorch element-wise kernels (torchtitan without torch.compile) against fused ones."""

import pytest

from scalesim.costs.compute import layer_time
from scalesim.costs.eager import eager_layer, eager_model, eager_ops
from scalesim.costs.host import layer_kernels
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.models.transformer import norm_op, transformer_block
from scalesim.parallel.sharding import shard_layer


def llama_block(norm="rmsnorm"):
    return transformer_block("b", s=4096, h=4096, heads=32, kv_heads=8, f=14336, ffn="swiglu", bias=False,
                             norm=norm, rotary=True)


def test_torchtitans_rmsnorm_moves_36_bytes_per_element_in_eight_kernels():
    # x.float() 6, pow 8, mean 4, +eps and rsqrt ~0, x*rsqrt 8, type_as 6, *weight 4 (models/norms.py RMSNorm)
    n = 4096 * 4096
    pieces = eager_ops(norm_op("norm_attn", n, 4096, "rmsnorm"))
    assert len(pieces) == 8
    assert sum(p.elements_moved for p in pieces) * 2 == pytest.approx(36 * n)


def test_layernorm_and_gemms_are_left_as_they_are():
    block = llama_block("layernorm")
    kept = [op for op in block.ops if op.kind in ("gemm", "attention") or op.kind == "norm"]
    assert all(eager_ops(op) == [op] for op in kept)


def test_eager_kernels_are_never_faster_and_launch_more():
    block, gpu = llama_block(), get_gpu("h100-sxm")
    fused, eager = layer_time(block, gpu, "bf16", 1), layer_time(eager_layer(block), gpu, "bf16", 1)
    assert eager.forward_s > fused.forward_s and eager.backward_s > fused.backward_s
    assert eager.matmul_forward_s == pytest.approx(fused.matmul_forward_s)
    assert layer_kernels(eager_layer(block), "flash")[0] > layer_kernels(block, "flash")[0]


def test_tensor_parallelism_still_splits_the_eager_pieces():
    eager = eager_layer(llama_block())
    split = shard_layer(eager, 4, 1, True)
    moved = sum(op.elements_moved for op in eager.ops if op.name in ("rope", "swiglu"))
    assert sum(op.elements_moved for op in split.ops if op.name in ("rope", "swiglu")) == pytest.approx(moved / 4)


def test_fp32_training_has_no_casts_to_add():
    model = get_model("llama3-8b", seq_len=1024)
    assert eager_model(model, "fp32") is model


def test_a_gelu_in_the_gemm_epilogue_shortens_a_bert_block_and_leaves_its_gemms_and_memory():
    from scalesim.costs.eager import gemm_gelu_model
    h100 = get_gpu("h100-sxm")
    bert = get_model("bert-large", seq_len=512)
    fused = gemm_gelu_model(bert)
    block, fused_block = bert.layers[1], fused.layers[1]
    assert [op for op in block.ops if op.name != "gelu"] == list(fused_block.ops)
    assert fused_block.activation_bytes == block.activation_bytes
    plain_t, fused_t = layer_time(block, h100, "fp16", 8), layer_time(fused_block, h100, "fp16", 8)
    assert fused_t.forward_s < plain_t.forward_s and fused_t.backward_s < plain_t.backward_s


def test_a_swiglu_model_has_no_gelu_to_fuse():
    llama = get_model({"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000,
                       "ffn": "swiglu", "ffn_hidden": 512}, seq_len=128)
    from scalesim.costs.eager import gemm_gelu_model
    assert gemm_gelu_model(llama) == llama


def test_compiled_complex_rope_runs_only_the_rotary_embedding_as_eager_kernels():
    # torch.compile fuses torchtitan's RMSNorm and SwiGLU; its complex64 RoPE falls back to ATen kernels
    from scalesim.costs.eager import eager_rope_model
    model = get_model("llama3-8b", seq_len=1024)
    block = eager_rope_model(model, "bf16").layers[1]
    fused, eager = model.layers[1], eager_model(model, "bf16").layers[1]
    assert [op for op in block.ops if op.name == "rope"] == [op for op in eager.ops if op.name == "rope"]
    assert [op for op in block.ops if op.name != "rope"] == [op for op in fused.ops if op.name != "rope"]
    gpu = get_gpu("h100-sxm")
    t = {name: layer_time(b, gpu, "bf16", 1).forward_s for name, b in
         (("fused", fused), ("compiled", block), ("eager", eager))}
    assert t["fused"] < t["compiled"] < t["eager"]
    assert eager_rope_model(model, "fp32") is model

