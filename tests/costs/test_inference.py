"""Serving iteration costs: memory-bound decode, quantised weights, the KV cache's size."""

from dataclasses import replace

import pytest

from scalesim.costs.inference import (BLOCK_TOKENS, ServingShard, iteration_compute_s, iteration_work,
                                      kv_bytes_per_token, kv_cache_blocks, weight_bytes_per_gpu)
from scalesim.hardware import get_gpu
from scalesim.models import get_model

LLAMA3_8B = get_model("llama3-8b", seq_len=1)


def decode_s(weights: str, gpu: str, batch: int = 1, context: int = 1024) -> float:
    work = iteration_work([(1, context, True)] * batch)
    return iteration_compute_s(work, ServingShard(LLAMA3_8B, weights=weights), get_gpu(gpu))


@pytest.mark.parametrize("gpu", ["rtx4090", "h100-sxm", "a100-80gb-sxm"])
def test_int4_weights_decode_faster_than_bf16_on_a_memory_bound_step(gpu):
    # A batch-1 decode step reads every weight once: 4-bit weights are ~3.8x fewer bytes
    # (the 16-bit embedding and output head stay), so the step is at least twice as fast.
    assert decode_s("int4", gpu) < decode_s("bf16", gpu) / 2
    assert decode_s("fp8", gpu) < decode_s("bf16", gpu)


def test_a_decode_step_takes_about_the_time_to_read_the_weights():
    h100 = get_gpu("h100-sxm")
    weights = weight_bytes_per_gpu(ServingShard(LLAMA3_8B))
    read_s = weights / h100.memory_bw_bytes_per_s          # at the full datasheet bandwidth
    assert read_s < decode_s("bf16", "h100-sxm") < 1.5 * read_s


def test_more_memory_bandwidth_is_never_slower():
    gpu = get_gpu("rtx4090")
    faster = replace(gpu, memory_bw_bytes_per_s=2 * gpu.memory_bw_bytes_per_s)
    shard = ServingShard(LLAMA3_8B)
    for entries in ([(1, 512, True)], [(1, 2048, True)] * 64, [(2048, 2048, True)]):
        work = iteration_work(entries)
        assert iteration_compute_s(work, shard, faster) <= iteration_compute_s(work, shard, gpu)


def test_longer_contexts_make_decode_slower_and_larger_batches_take_longer():
    assert decode_s("bf16", "h100-sxm", 64, 4096) > decode_s("bf16", "h100-sxm", 64, 512)
    assert decode_s("bf16", "h100-sxm", 128) > decode_s("bf16", "h100-sxm", 8)


def test_tensor_parallelism_splits_weights_and_kv_heads():
    one, four = ServingShard(LLAMA3_8B), ServingShard(LLAMA3_8B, tp=4)
    assert weight_bytes_per_gpu(four) == pytest.approx(weight_bytes_per_gpu(one) / 4, rel=1e-6)
    assert kv_bytes_per_token(four) == kv_bytes_per_token(one) / 4
    # Llama 3 8B has 8 KV heads: beyond tp 8 each GPU keeps a whole head (vLLM replicates them).
    assert kv_bytes_per_token(ServingShard(LLAMA3_8B, tp=16)) == kv_bytes_per_token(ServingShard(LLAMA3_8B, tp=8))


def test_kv_bytes_per_token_from_the_published_shape():
    # Llama 3 8B: 32 layers, 8 KV heads of 128 dimensions (HF config.json); K and V in 16-bit.
    assert kv_bytes_per_token(ServingShard(LLAMA3_8B)) == 2 * 32 * 8 * 128 * 2
    assert kv_bytes_per_token(ServingShard(LLAMA3_8B, kv_cache="fp8")) == 2 * 32 * 8 * 128


def test_kv_cache_blocks_are_free_memory_over_a_block():
    shard = ServingShard(LLAMA3_8B)
    block = kv_bytes_per_token(shard) * BLOCK_TOKENS
    for free in (0.0, block - 1, block, 12.5 * block, 3e9):
        blocks = kv_cache_blocks(free, shard)
        assert blocks * block <= free < (blocks + 1) * block
    assert kv_cache_blocks(-1e9, shard) == 0


def test_the_workspace_holds_one_step_of_a_block_not_all_its_outputs():
    # The QKV output is freed before the MLP runs, so the peak per token never holds it beside the
    # SiLU-and-mul step (gate/up output and its product) and the residual stream; it holds at least
    # that step.
    from scalesim.costs.inference import activation_workspace_bytes, block_gemms

    for name in ("llama2-7b", "llama3-8b", "llama3-70b"):
        shard = ServingShard(get_model(name, seq_len=1))
        (qkv, _), _, (up, _), _ = block_gemms(shard)
        per_token = activation_workspace_bytes(shard, 1, 0) / 2.0          # 16-bit elements
        h = shard.model.hidden
        assert 1.5 * up <= per_token < qkv + 1.5 * up + 2 * h


def test_a_static_batch_the_source_ran_fits_in_the_kv_cache():
    # TensorRT-LLM v0.6.1 ran Llama 2 7B FP16 on one A100 80GB at batch 52, 2048 + 128 tokens
    # (docs/source/performance.md @138f96d4): every request of that batch must fit at once.
    from pathlib import Path

    from scalesim.app.serve import prepare_serving
    from scalesim.serving.spec import load_serving_scenario

    path = Path(__file__).parents[2] / "validation/scenarios/trtllm-v061-a100x1-llama2-7b-fp16-b52-2048-128.yaml"
    setup = prepare_serving(*load_serving_scenario(path))
    assert setup.kv_blocks * BLOCK_TOKENS >= 52 * (2048 + 128)


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb-sxm", "l40s"])
@pytest.mark.parametrize("weights", ["bf16", "fp8", "int4"])
def test_more_prompt_tokens_never_shorten_the_prefill(gpu, weights):
    # Time to first token alone on a replica is one prefill: a longer prompt does all of a shorter
    # one's work and more (no shape may make it faster).
    shard, device = ServingShard(LLAMA3_8B, weights=weights), get_gpu(gpu)
    times = [iteration_compute_s(iteration_work([(p, p, True)]), shard, device) for p in range(2, 4097, 7)]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_decode_attention_reads_the_cache_faster_than_a_copy_but_not_the_datasheet():
    # A decode step only reads its keys and values: on H100 at the read-only stream rate Azure
    # measures (BabelStream Dot 3.18 TB/s), above a copy kernel's (2.90) and below the 3.35 peak.
    from scalesim.costs.inference import attention_iteration_s

    h100, shard = get_gpu("h100-sxm"), ServingShard(LLAMA3_8B, kv_cache="fp8")
    kv = 64 * 4096 * kv_bytes_per_token(shard)
    took = attention_iteration_s(iteration_work([(1, 4096, True)] * 64), shard, h100)
    assert kv / h100.memory_bw_bytes_per_s < took < kv / (h100.memory_bw_bytes_per_s * h100.memory_bw_efficiency)


def test_a_read_only_stream_is_never_slower_than_a_copy_nor_faster_than_the_datasheet():
    from scalesim.hardware.catalog import gpus

    for gpu in gpus().values():
        copy = gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency
        assert copy <= gpu.read_bw_bytes_per_s <= gpu.memory_bw_bytes_per_s


# Qwen3-32B's config.json (Qwen/Qwen3-32B): hidden_size 5120, num_attention_heads 64, num_key_value_heads 8,
# head_dim 128 (heads x head_dim = 8192, not hidden), num_hidden_layers 64, vocab_size 151936, intermediate 25600.
QWEN3_32B = {"kind": "transformer", "name": "qwen3-32b", "layers": 64, "hidden": 5120, "heads": 64, "kv_heads": 8,
             "head_dim": 128, "vocab": 151936, "ffn_hidden": 25600, "ffn": "swiglu"}


@pytest.mark.parametrize("spec, layers, kv_heads, head_dim", [
    (QWEN3_32B, 64, 8, 128),
    ("gemma2-9b", 42, 8, 256),           # HF google/gemma-2-9b: hidden 3584, 16 heads, head_dim 256
    ("gemma2-27b", 46, 16, 128),         # HF google/gemma-2-27b: hidden 4608, 32 heads, head_dim 128
])
def test_kv_bytes_per_token_follow_the_configs_head_dim_not_hidden_over_heads(spec, layers, kv_heads, head_dim):
    """KV bytes a token = 2 x layers x kv_heads x head_dim x bytes, head_dim as the HF config gives it."""
    model = get_model(spec, seq_len=1)
    assert kv_bytes_per_token(ServingShard(model)) == 2 * layers * kv_heads * head_dim * 2
    assert kv_bytes_per_token(ServingShard(model, tp=kv_heads)) == 2 * layers * 1 * head_dim * 2
