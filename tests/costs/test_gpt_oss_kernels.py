"""gpt-oss's kernels: sliding-window attention (which blocks, what the flash kernel runs) and the experts' eager bias."""

from scalesim.costs.compute import attention_time_s
from scalesim.costs.flash import WINDOW_TILE, window_share
from scalesim.hardware import get_gpu
from scalesim.models.packing import sliding_window
from scalesim.models.zoo import get_model


def _attention(layer):
    return next(op for op in layer.ops if op.kind == "attention")


def _blocks(model):
    return [layer for layer in model.layers if any(op.kind == "attention" for op in layer.ops)]


def test_gpt_oss_alternates_sliding_and_full_blocks_from_the_first():
    # Megatron-Core is_layer_window_attention: layer_number (1-based) % 2 != 0 is windowed
    blocks = _blocks(get_model("gpt-oss-120b", seq_len=4096))
    assert len(blocks) == 36
    assert [_attention(b).window for b in blocks[:4]] == [128, 0, 128, 0]
    assert sum(1 for b in blocks if _attention(b).window) == 18


def _fa2_tiles(seq, window):
    """Key tiles FlashAttention-2's causal forward loops over with a left window (flash_fwd_kernel.h:
    n_block_min = (m_block * kBlockM - window_left) / kBlockN, n_block_max = m_block + 1), 128 x 128."""
    n = -(-seq // WINDOW_TILE)
    return sum(m + 1 - max(0, (m * WINDOW_TILE - window) // WINDOW_TILE) for m in range(n)), n


def test_window_share_is_the_tiles_flash_attention_2_runs():
    for seq, window in ((4096, 128), (8192, 128), (8192, 4096), (8192, 2047), (4096, 2047)):
        tiles, n = _fa2_tiles(seq, window)
        assert window_share(seq, window) == tiles / n ** 2
    assert window_share(8192, 128) < window_share(4096, 128) / 1.9     # the band does not grow with the sequence


def test_a_windowed_block_runs_less_attention_and_saves_more_at_longer_sequences():
    gpu = get_gpu("b200")
    saved = []
    for s in (4096, 8192):
        blocks = _blocks(get_model("gpt-oss-120b", seq_len=s))
        windowed, full = _attention(blocks[0]), _attention(blocks[1])
        for backward in (False, True):
            w = attention_time_s(windowed, gpu, "bf16", 1, "flash", backward=backward)
            f = attention_time_s(full, gpu, "bf16", 1, "flash", backward=backward)
            assert w < f / 4
        saved.append(f / w)
    assert saved[1] > saved[0]


def test_the_window_leaves_flop_parameters_and_non_flash_kernels_alone():
    base = get_model("llama3.2-1b", seq_len=4096)
    windowed = sliding_window(base, 128, 2)
    assert windowed.params == base.params and windowed.model_flop_per_sample == base.model_flop_per_sample
    gpu = get_gpu("h100-sxm")
    a, b = _attention(_blocks(windowed)[0]), _attention(_blocks(base)[0])
    assert a.window == 128 and a.flop == b.flop
    # unfused attention materialises every score (Transformer Engine turns the window into a mask)
    assert attention_time_s(a, gpu, "bf16", 1, "fused") == attention_time_s(b, gpu, "bf16", 1, "fused")


def test_biased_experts_add_their_bias_in_eager_passes_before_the_combine():
    # Megatron-Core TEGroupedMLP._apply_bias: fc2's bias times the routing probability, eager torch ops
    from scalesim.costs.compute import layer_time
    from scalesim.parallel.experts import shard_experts
    gpt_oss = get_model("gpt-oss-120b", seq_len=4096).layers[1]
    qwen = get_model("qwen3-30b-a3b", seq_len=4096).layers[1]
    assert not any(op.name == "expert_bias" for op in qwen.ops)
    names = [op.name for op in shard_experts(gpt_oss, 64, 1.0).ops]
    assert names.index("expert_down") < names.index("expert_bias") == names.index("expert_unsort") - 1
    assert [op.name for op in shard_experts(qwen, 8, 1.0).ops].index("expert_unsort") > 0
    bias = next(op for op in gpt_oss.ops if op.name == "expert_bias")
    rows = 4096 * 4                                  # each token's top-4 copies, hidden 2880
    assert bias.elements_moved == bias.backward_elements > rows * 2880
    without = type(gpt_oss)(**{**{f: getattr(gpt_oss, f) for f in gpt_oss.__slots__},
                               "ops": tuple(op for op in gpt_oss.ops if op.name != "expert_bias")})
    gpu = get_gpu("gb200")
    a, b = layer_time(gpt_oss, gpu, "bf16", 1), layer_time(without, gpu, "bf16", 1)
    assert a.forward_s > b.forward_s and a.backward_s > b.backward_s


def test_the_busiest_expert_rank_adds_its_bias_over_its_own_rows_both_ways():
    # shard_experts scales the expert ops by the busiest rank's load (its routed rows over the mean rank's):
    # the bias's passes run over those rows in backward as in forward
    from scalesim.parallel.experts import shard_experts
    block = next(layer for layer in get_model("gpt-oss-120b", seq_len=4096).layers if layer.expert_params)
    bias = next(op for op in block.ops if op.name == "expert_bias")
    for load in (1.0, 1.5):
        busiest = next(op for op in shard_experts(block, 8, load).ops if op.name == "expert_bias")
        assert busiest.elements_moved == bias.elements_moved * load
        assert busiest.backward_elements == bias.backward_elements * load
