"""Mixture-of-experts models: published parameter counts, and an MoE layer's work vs a dense one."""

import pytest

from scalesim.models import get_model
from scalesim.models.moe import moe_block
from scalesim.models.spec import MoESpec
from scalesim.models.transformer import transformer_block

# (total, active) as published; sources in scalesim/models/zoo.py (model cards and papers).
PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9),        # Jiang et al. 2024, Mixtral of Experts: 47B / 13B
    "mixtral-8x22b": (141e9, 39e9),           # Mistral AI, Mixtral 8x22B announcement
    "qwen3-30b-a3b": (30.5e9, 3.3e9),         # Qwen3 model card
    "qwen3-235b-a22b": (235e9, 22e9),         # Qwen3 model card
    "deepseek-v3": (671e9, 37e9),             # DeepSeek-V3 Technical Report, sec. 4.2
    "llama4-scout": (109e9, 17e9),            # Llama 4 model card (109B includes the vision encoder)
}
# gpt-oss model card, Table 1: totals, and active counts that leave out the embedding table.
GPT_OSS = {"gpt-oss-20b": (20.91e9, 3.61e9), "gpt-oss-120b": (116.83e9, 5.13e9)}


@pytest.mark.parametrize("name,counts", PUBLISHED.items())
def test_total_and_active_params_match_published(name, counts):
    m = get_model(name, seq_len=4096)
    assert m.params == pytest.approx(counts[0], rel=0.02)
    assert m.active_params == pytest.approx(counts[1], rel=0.03)


def test_mixtral_8x7b_matches_hf_exactly():
    assert get_model("mixtral-8x7b", seq_len=4096).params == 46_702_792_704   # HF safetensors total


@pytest.mark.parametrize("name,counts", GPT_OSS.items())
def test_gpt_oss_counts_without_the_embedding(name, counts):
    m = get_model(name, seq_len=4096)
    embedding = m.layers[0].params
    assert m.params == pytest.approx(counts[0], rel=0.01)
    assert m.active_params - embedding == pytest.approx(counts[1], rel=0.01)


def test_deepseek_v3_has_three_dense_blocks_then_moe():
    m = get_model("deepseek-v3", seq_len=4096)
    blocks = [layer for layer in m.layers if layer.kind == "transformer_block"]
    assert [b.expert_params > 0 for b in blocks[:4]] == [False, False, False, True]
    assert all(b.expert_params > 0 for b in blocks[3:])


def test_top_k_equal_to_experts_does_the_dense_layer_of_the_same_total_width():
    s, h, e, f = 64, 128, 4, 96
    block = dict(s=s, h=h, heads=4, kv_heads=4, ffn="swiglu", bias=False, norm="rmsnorm", rotary=True)
    moe = moe_block("b", moe=MoESpec(experts=e, top_k=e, expert_ffn_hidden=f), mla=None, f=f, **block)
    dense = transformer_block("b", f=e * f, **block)

    def mlp_gemm_flop(layer, prefixes):
        return sum(op.flop for op in layer.ops if op.kind == "gemm" and op.name.startswith(prefixes))

    assert mlp_gemm_flop(moe, "expert_") == mlp_gemm_flop(dense, "mlp_")
    assert mlp_gemm_flop(moe, ("qkv", "attn_out")) == mlp_gemm_flop(dense, ("qkv", "attn_out"))
    assert moe.params - h * e == dense.params          # the same weights, plus the router


def test_more_experts_at_fixed_top_k_add_parameters_not_work():
    block = dict(s=64, h=128, heads=4, kv_heads=4, f=96, ffn="swiglu", bias=False, norm="rmsnorm")
    few = moe_block("b", moe=MoESpec(8, 2, 96), mla=None, **block)
    many = moe_block("b", moe=MoESpec(32, 2, 96), mla=None, **block)
    expert_flop = [sum(op.flop for op in b.ops if op.name.startswith("expert_")) for b in (few, many)]
    assert many.params > few.params and expert_flop[0] == expert_flop[1]
    assert many.active_params - few.active_params == 128 * (32 - 8)     # only the router grows
