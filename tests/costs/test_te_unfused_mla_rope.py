"""Transformer Engine's unfused attention (costs/te_unfused.py) and MLA's unfused RoPE (costs/mla_rope.py)."""

import pytest

from scalesim.app.setup import prepare
from scalesim.costs.compute import attention_time_s, layer_time
from scalesim.costs.host import layer_kernels
from scalesim.costs.mla_rope import unfused_mla_rope_model
from scalesim.costs.te_unfused import mask_bytes
from scalesim.errors import InputError
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer
from scalesim.scenario import Scenario

GB200 = get_gpu("gb200")


def _attention(seq=4096):
    block = get_model("deepseek-v3", seq_len=seq).layers[1]
    return next(op for op in block.ops if op.kind == "attention")


def test_te_unfused_backward_adds_only_the_gradient_scaling_of_q_and_k():
    op = _attention()
    fused = attention_time_s(op, GB200, "bf16", 1, "fused", backward=True)
    extra = attention_time_s(op, GB200, "bf16", 1, "te-unfused", backward=True) - fused
    heads = op.score_elements / op.seq ** 2
    q_bytes = op.seq * heads * op.head_dims[0] * 2
    # dQ and dK each read and written once: at least that at DRAM speed, far less than the scores' passes
    assert 4 * q_bytes / GB200.memory_bw_bytes_per_s <= extra < 0.1 * fused


def test_te_unfused_forward_pays_at_least_the_mask_at_dram_speed():
    op = _attention()
    extra = attention_time_s(op, GB200, "bf16", 1, "te-unfused") - attention_time_s(op, GB200, "bf16", 1, "fused")
    assert extra >= mask_bytes(4096) / GB200.memory_bw_bytes_per_s


def test_the_mask_is_built_once_per_call_not_per_sample():
    op = _attention()

    def extra(batch):
        return (attention_time_s(op, GB200, "bf16", batch, "te-unfused")
                - attention_time_s(op, GB200, "bf16", batch, "fused"))
    # only the output copy grows with the micro-batch: twice the samples cost less than twice the extra
    assert extra(1) < extra(2) < 2 * extra(1)


def test_a_model_without_a_causal_mask_builds_none():
    from dataclasses import replace

    op = _attention()
    assert op.causal
    bidirectional = replace(op, causal=False)

    def extra(o):
        return attention_time_s(o, GB200, "bf16", 1, "te-unfused") - attention_time_s(o, GB200, "bf16", 1, "fused")
    assert extra(bidirectional) < extra(op) - 0.9 * mask_bytes(4096) / GB200.memory_bw_bytes_per_s
    block = get_model("deepseek-v3", seq_len=4096).layers[1]
    unmasked = replace(block, ops=tuple(replace(o, causal=False) for o in block.ops))
    assert layer_kernels(unmasked, "te-unfused")[0] < layer_kernels(block, "te-unfused")[0]


@pytest.mark.parametrize("causal", [True, False])
def test_the_host_launches_the_kernels_the_bytes_are_counted_for(causal):
    # one rule for both sides (te_unfused.builds_mask): the launches the host adds over fused attention are
    # the kernels whose bytes the GPU time counts, forward and backward, with or without the mask
    from dataclasses import replace
    from scalesim.costs.te_unfused import builds_mask, extra_bytes
    block = get_model("deepseek-v3", seq_len=4096).layers[1]
    block = replace(block, ops=tuple(replace(o, causal=causal) for o in block.ops))
    op = next(o for o in block.ops if o.kind == "attention")
    unfused, fused = layer_kernels(block, "te-unfused"), layer_kernels(block, "fused")
    assert unfused[0] - fused[0] == extra_bytes(op, 1, 2.0, False)[1]
    assert unfused[1] - fused[1] == extra_bytes(op, 1, 2.0, True)[1]
    assert builds_mask(op) == causal == (extra_bytes(op, 1, 2.0, False)[0] > mask_bytes(4096))


def test_the_mask_grows_with_the_square_of_the_sequence():
    assert mask_bytes(8192) == pytest.approx(4 * mask_bytes(4096))


def test_te_unfused_launches_more_forward_kernels_than_fused():
    block = get_model("deepseek-v3", seq_len=4096).layers[1]
    assert layer_kernels(block, "te-unfused")[0] > layer_kernels(block, "fused")[0]
    assert layer_kernels(block, "te-unfused")[1] == layer_kernels(block, "fused")[1] + 2


def test_fp8_attention_is_refused_with_te_unfused():
    with pytest.raises(ValueError, match="no FP8 kernel"):
        Scenario.model_validate({**_scenario(), "training": {**_scenario()["training"], "precision": "fp8",
                                                             "attention": "te-unfused", "fp8_attention": True}})


def test_unfused_mla_rope_moves_more_bytes_both_ways_and_keeps_the_gemms():
    model = get_model("deepseek-v3", seq_len=4096)
    block, eager = model.layers[1], unfused_mla_rope_model(model).layers[1]
    fused_t, eager_t = layer_time(block, GB200, "bf16", 1), layer_time(eager, GB200, "bf16", 1)
    assert eager_t.forward_s > fused_t.forward_s and eager_t.backward_s > fused_t.backward_s
    assert eager_t.matmul_forward_s == pytest.approx(fused_t.matmul_forward_s)
    assert ([op for op in eager.ops if op.name not in ("rope", "rope_key")]
            == [op for op in block.ops if op.name != "rope"])


def test_mla_up_proj_recomputation_replays_the_unfused_rope():
    model = get_model("deepseek-v3", seq_len=4096)
    block, eager = model.layers[1], unfused_mla_rope_model(model).layers[1]
    fused_r = layer_time(block, GB200, "bf16", 1, "selective", recompute_modules=("mla_up_proj",)).recompute_s
    eager_r = layer_time(eager, GB200, "bf16", 1, "selective", recompute_modules=("mla_up_proj",)).recompute_s
    assert eager_r > fused_r


@pytest.mark.parametrize("sp", [True, False])
def test_tensor_parallelism_splits_the_unfused_rope_by_heads_but_not_the_one_rotary_key(sp):
    # Megatron-Core's k_pos_emb is [s, b, 1, r], one rotary key for all heads, out of a down-projection every
    # TP rank runs whole (gathered over the sequence under SP): each rank rotates all of it, and the YaRN
    # frequencies too; the query's rotary part and the cats go by heads
    from scalesim.costs.mla_rope import FREQ_KERNELS, Q_ROPE_KERNELS
    model = get_model("deepseek-v3", seq_len=4096)
    eager = unfused_mla_rope_model(model).layers[1]
    r = 64                                                          # DeepSeek-V3 config.json qk_rope_head_dim
    per_token = (sum(Q_ROPE_KERNELS) + 2 * FREQ_KERNELS) * r        # the key's 7 kernels, 12 of [s, r] each
    moved = sum(op.elements_moved for op in eager.ops if op.name.startswith("rope"))
    for tp in (2, 4):
        split = shard_layer(eager, tp, 1, sp)
        on_rank = sum(op.elements_moved for op in split.ops if op.name.startswith("rope"))
        assert on_rank == pytest.approx((moved - per_token * 4096) / tp + per_token * 4096)
    halved = shard_layer(eager, 1, 2, sp)               # context parallelism halves all of it, key included
    assert sum(op.elements_moved for op in halved.ops if op.name.startswith("rope")) == pytest.approx(moved / 2)


@pytest.mark.parametrize("tp, sp", [(2, True), (4, False)])
def test_the_rotary_keys_backward_is_its_chain_once_a_token_whole_on_every_tp_rank(tp, sp):
    # The key's rotary part is [s, b, 1, r] (one for all heads): its chain's backward (products 2 x 2r, negation
    # r, chunk's cat 2r, two gradient sums 2 x 3r, the strided slices' zero-filled gradients 4r and 2r: 19r) runs
    # once a token, whole on every TP rank; the YaRN frequencies take no gradient. The per-head part (the query's
    # chain, the cats' and splits' gradients, the key's gradient summed over the heads) splits by heads.
    n, r, v, heads, s = 128, 64, 128, 128, 4096         # DeepSeek-V3 config.json: qk_nope/qk_rope/v head dims, heads
    eager = unfused_mla_rope_model(get_model("deepseek-v3", seq_len=s)).layers[1]
    key = sum(op.backward_elements for op in eager.ops if op.name == "rope_key")
    per_head = sum(op.backward_elements for op in eager.ops if op.name == "rope")
    assert key == pytest.approx(19 * r * s)
    assert per_head == pytest.approx((2 * (n + v) + r + 2 * (n + r) + 19 * r) * heads * s)
    split = shard_layer(eager, tp, 1, sp)
    assert sum(op.backward_elements for op in split.ops if op.name == "rope_key") == pytest.approx(key)
    assert sum(op.backward_elements for op in split.ops if op.name == "rope") == pytest.approx(per_head / tp)


def _scenario(model="deepseek-v3", rope_fusion=True):
    return {"name": "t", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": model,
            "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "micro_batch": 1,
                         "rope_fusion": rope_fusion},
            "parallel": {"tp": 8, "pp": 1, "dp": 1, "ep": 1}}


def test_rope_fusion_false_is_refused_without_mla():
    with pytest.raises(InputError, match="multi-head latent attention") as error:
        prepare(Scenario.model_validate(_scenario("llama3-8b", False)))
    assert error.value.key == "training.rope_fusion"


def test_rope_fusion_false_replaces_each_mla_blocks_rope():
    fused = prepare(Scenario.model_validate(_scenario()))
    eager = prepare(Scenario.model_validate(_scenario(rope_fusion=False)))
    count = [sum(op.name == "rope" for op in layer.ops) for layer in eager.model.layers]
    assert max(count) > 1 and all(n == 0 for n, layer in zip(count, fused.model.layers)
                                  if not any(op.name == "mla_q_up" for op in layer.ops))


@pytest.mark.parametrize("kernels", ["eager", "compiled-complex-rope", "nanotron"])
def test_rope_fusion_false_is_refused_where_the_rope_is_already_split_into_eager_kernels(kernels):
    # eager_model / eager_rope_model cut MLA's one `rope` op into pieces; unfusing each piece again
    # would count the eager RoPE several times over
    scenario = _scenario(rope_fusion=False)
    scenario["training"]["elementwise_kernels"] = kernels
    with pytest.raises(ValueError, match="rope_fusion"):
        Scenario.model_validate(scenario)
    scenario["training"]["rope_fusion"] = True
    Scenario.model_validate(scenario)
