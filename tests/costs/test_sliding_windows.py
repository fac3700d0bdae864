"""Sliding windows of Mistral 7B v0.1, Gemma 2 and Phi-3 mini (models/windows.py), and what a windowed
kernel runs under context parallelism (Transformer Engine's all-gather path, costs/context_chunks.py)."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, attention_time_s, layer_time
from scalesim.costs.flash import WINDOW_TILE, window_share
from scalesim.hardware import get_gpu
from scalesim.models.packing import with_attention_fields
from scalesim.models.zoo import get_model
from scalesim.parallel.sharding import shard_layer


def _windows(model):
    return [op.window for layer in model.layers for op in layer.ops if op.kind == "attention"]


def _attention(layer):
    return next(op for op in layer.ops if op.kind == "attention")


def test_mistral_v01_and_phi3_window_every_layer_gemma2_every_other_from_the_first():
    # config.json sliding_window: Mistral-7B-v0.1 4096, Phi-3-mini-4k 2047 (every layer); Gemma 2 4096 on
    # layer_idx % 2 == 0 (transformers modular_gemma2.py); Mixtral v0.1 and Qwen2.5 none
    assert _windows(get_model("mistral-7b", seq_len=8192)) == [4096] * 32
    assert _windows(get_model("phi-3-mini", seq_len=4096)) == [2047] * 32
    for name, layers in (("gemma2-9b", 42), ("gemma2-27b", 46)):
        assert _windows(get_model(name, seq_len=8192)) == [4096, 0] * (layers // 2)
    for name in ("mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "llama3-8b"):
        assert set(_windows(get_model(name, seq_len=8192))) == {0}


def test_gpt_oss_keeps_its_alternation():
    assert _windows(get_model("gpt-oss-120b", seq_len=4096)) == [128, 0] * 18


@pytest.mark.parametrize("backward", [False, True])
def test_a_window_as_long_as_the_sequence_changes_nothing(backward):
    # Mistral's 4096-token window at 4096 tokens or fewer: every query sees all its earlier keys
    gpu = get_gpu("h100-sxm")
    for seq in (2048, 4096):
        windowed = _attention(get_model("mistral-7b", seq_len=seq).layers[1])
        causal = with_attention_fields(get_model("mistral-7b", seq_len=seq), window=0).layers[1]
        assert attention_time_s(windowed, gpu, "bf16", 1, "flash", backward) == \
            attention_time_s(_attention(causal), gpu, "bf16", 1, "flash", backward)


@pytest.mark.parametrize("gpu_name", ["h100-sxm", "a100-80gb-sxm", "mi300x"])
def test_a_window_never_slows_attention_and_changes_nothing_else(gpu_name):
    gpu = get_gpu(gpu_name)
    for name, seq in (("mistral-7b", 8192), ("mistral-7b", 16384), ("gemma2-9b", 8192), ("phi-3-mini", 4096)):
        model = get_model(name, seq_len=seq)
        plain = with_attention_fields(model, window=0)
        for cp in (1, 2, 4):
            for attention in ("flash", "fused", "naive"):
                a = layer_time(shard_layer(model.layers[1], 1, cp, False), gpu, "bf16", 1, attention=attention)
                b = layer_time(shard_layer(plain.layers[1], 1, cp, False), gpu, "bf16", 1, attention=attention)
                wa = attention_time_s(_attention(shard_layer(model.layers[1], 1, cp, False)), gpu, "bf16", 1,
                                      attention)
                wb = attention_time_s(_attention(shard_layer(plain.layers[1], 1, cp, False)), gpu, "bf16", 1,
                                      attention)
                assert wa <= wb
                assert a.forward_s - wa == pytest.approx(b.forward_s - wb, rel=1e-12)   # only attention moved
                if attention != "flash":
                    assert wa == wb        # materialised scores: the window is a mask, all the work is done


def test_the_windowed_share_is_what_flash_attention_skips_to():
    # Mistral at 8192 tokens: query tile j runs min(j, 32) + 1 of the 64 key tiles, 1584 of 4096
    assert window_share(8192, 4096) == 1584 / 4096
    h100 = get_gpu("h100-sxm")
    windowed = _attention(get_model("mistral-7b", seq_len=8192).layers[1])
    plain = _attention(with_attention_fields(get_model("mistral-7b", seq_len=8192), window=0).layers[1])
    w, f = (attention_time_s(op, h100, "bf16", 1, "flash") - KERNEL_OVERHEAD_S for op in (windowed, plain))
    assert 1.2 < f / w < 2.0     # the causal kernel runs 2080 tiles at its causal rate, the band 1584


def _rank_tiles(seq, window, cp, rank):
    """Tiles one rank's two chunk kernels run (Transformer Engine AttnFuncWithCPAndKVAllGather: queries of
    chunk c against the keys from the chunk's start less the window): a key tile runs if some key in it
    lies in some query's window [q - window, q]."""
    per_chunk = seq // (2 * cp) // WINDOW_TILE
    tiles = 0
    for chunk in (rank, 2 * cp - 1 - rank):
        for j in range(chunk * per_chunk, (chunk + 1) * per_chunk):
            first_query = j * WINDOW_TILE
            tiles += sum(1 for k in range(j + 1) if (k + 1) * WINDOW_TILE - 1 >= first_query - window)
    return tiles


@pytest.mark.parametrize("seq, window, cp", [(8192, 128, 4), (8192, 4096, 2), (8192, 4096, 4),
                                             (32768, 4096, 8), (4096, 2047, 2)])
def test_under_context_parallelism_the_busiest_rank_runs_its_chunks_bands(seq, window, cp):
    busiest = max(_rank_tiles(seq, window, cp, r) for r in range(cp))
    assert window_share(seq, window, cp) == busiest * cp / (seq // WINDOW_TILE) ** 2


def test_a_windowed_context_parallel_rank_runs_two_kernels_over_its_own_band():
    # gpt-oss's 128-key window at 8192 tokens over cp 4: no ring step's keys but the rank's own chunks'
    # (and the 128 before each) reach its queries; Transformer Engine runs one kernel per local chunk
    h100 = get_gpu("h100-sxm")
    block = get_model("gpt-oss-120b", seq_len=8192).layers[1]
    whole = attention_time_s(_attention(shard_layer(block, 1, 1, False)), h100, "bf16", 1, "flash")
    split = attention_time_s(_attention(shard_layer(block, 1, 4, False)), h100, "bf16", 1, "flash")
    assert split - 2 * KERNEL_OVERHEAD_S == pytest.approx((whole - KERNEL_OVERHEAD_S) / 4, rel=0.02)
    full = _attention(shard_layer(get_model("gpt-oss-120b", seq_len=8192).layers[2], 1, 4, False))
    assert full.window == 0 and attention_time_s(full, h100, "bf16", 1, "flash") > 10 * split


def test_gemma2_eager_attention_soft_caps_its_scores_in_three_more_kernels():
    # transformers eager_attention_forward: scores / 50, tanh, * 50 before the mask (attention_dropout 0.0)
    from scalesim.costs.score_ops import score_passes
    from scalesim.models.packing import attention_score_ops
    gemma = get_model("gemma2-9b", seq_len=4096)
    uncapped_ops = ("scale", "mask_add", "softmax")
    capped = _attention(gemma.layers[1])
    for backward in (False, True):
        passes, kernels = score_passes(capped.score_ops, backward)
        base, base_kernels = score_passes(uncapped_ops, backward)
        assert kernels == base_kernels + 3
        assert passes == base + (2 + 3 + 2 if backward else 2 + 2 + 2)      # tanh_backward reads two, writes one
    h100 = get_gpu("h100-sxm")
    uncapped = _attention(attention_score_ops(gemma, uncapped_ops).layers[1])
    assert attention_time_s(capped, h100, "bf16", 1, "naive") > attention_time_s(uncapped, h100, "bf16", 1, "naive")
    # flash kernels (FlashAttention 2.6's softcap) cap in registers: no published cost, none charged
    assert attention_time_s(capped, h100, "bf16", 1, "flash") == attention_time_s(uncapped, h100, "bf16", 1, "flash")


@pytest.mark.parametrize("backward", [False, True])
def test_a_gathered_layer_without_a_window_runs_its_share_of_the_causal_tiles_in_two_kernels(backward):
    """Gemma 2's global layers under CP (Transformer Engine's all-gather, one cp_comm_type for the model): the
    rank's two chunks' kernels over all the keys before each chunk's end, 1/cp of the unsharded causal kernel's
    tiles at its per-tile cost, in two launches where the ring takes cp."""
    gpu, cp = get_gpu("h100-sxm"), 4
    block = get_model("gemma2-9b", seq_len=16384).layers[2]
    assert _attention(block).window == 0
    whole = attention_time_s(_attention(block), gpu, "bf16", 1, "flash", backward=backward)
    gathered = _attention(shard_layer(with_attention_fields(_blocks_of(block), cp_gather=True).layers[0], 1, cp, False))
    launches = 2 if backward else 1
    assert gathered.ring_steps == cp
    assert (attention_time_s(gathered, gpu, "bf16", 1, "flash", backward=backward) - 2 * launches * KERNEL_OVERHEAD_S
            == pytest.approx((whole - launches * KERNEL_OVERHEAD_S) / cp, rel=0.01))


def _blocks_of(layer):
    return replace(get_model("gemma2-9b", seq_len=16384), layers=(layer,))
