"""Where scalesim's time to first token goes in the TensorRT-LLM v0.5 first-token cases, and a cross-check.

Run: python validation/ttft_breakdown.py
Prints, for every `trtllm-v05-*-ttft-*` case, the predicted time of its one prefill split into the GEMMs
(all layers; each the roofline max of its FLOP and weight bytes, plus the FP8 activation cast), the rest of
each block (element-wise kernels, kernel overheads), attention (with its two roofs: FLOP at the flash rate
and the keys and values re-read once per 128-row query tile), the output head, the tensor-parallel
all-reduces and the host's share, against the measured time. Then the same engine's other published
first-token and batch-1 figures, which are not validation cases: GPT-J 6B from the same performance.md
tables, and the TensorRT-LLM v0.5.0 blog's GPT-J rows (docs/source/blogs/H100vsA100.md). GPT-J is an inline
model (28 x 4096, 16 heads of 256, GELU MLP of 16384, vocabulary 50400; EleutherAI/gpt-j-6b config.json), run
with the Llama scenarios' GPU, weights and KV format.
A diagnostic only: nothing here changes what `serve` or `validate` compute (validation/ttft-short-prompt-notes.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalesim.app.serve import IterationTimer, prepare_serving  # noqa: E402
from scalesim.app.validate import load_cases  # noqa: E402
from scalesim.costs.compute import flash_efficiency  # noqa: E402
from scalesim.costs.inference import (KV_BYTES, WEIGHT_BYTES, _gemm_s, attention_iteration_s,  # noqa: E402
                                      block_dense_s, block_gemms, head_time_s, iteration_work)
from scalesim.serving.spec import load_serving_scenario  # noqa: E402

GPTJ = {"kind": "transformer", "layers": 28, "hidden": 4096, "heads": 16, "vocab": 50400,
        "ffn": "gelu", "ffn_hidden": 16384}
# GPT-J 6B first-token latency, batch 1 (performance.md @138f96d, Low Latency tables, TensorRT-LLM v0.5), ms.
GPTJ_TTFT_MS = {("h100x1-llama2-7b-fp8", 128): 7, ("h100x1-llama2-7b-fp8", 2048): 29,
                ("l40sx1-llama2-7b-fp8", 128): 12, ("l40sx1-llama2-7b-fp8", 2048): 71,
                ("a100x1-llama2-7b-fp16", 128): 12, ("a100x1-llama2-7b-fp16", 2048): 129}
FALCON = {"kind": "transformer", "layers": 80, "hidden": 14848, "heads": 232, "kv_heads": 8, "vocab": 65024,
          "ffn": "gelu", "ffn_hidden": 59392}
# Falcon 180B at tp 8, first-token latency, batch 1 (same tables), ms; its engines are built with the GEMM plugin
# and in-flight batching (performance.md's Falcon-180B commands), unlike the Llama and GPT-J ones.
FALCON_TTFT_MS = {("h100x4-llama2-70b-fp8", 128): 27, ("h100x4-llama2-70b-fp8", 2048): 205,
                  ("a100x4-llama2-70b-fp16", 128): 61, ("a100x4-llama2-70b-fp16", 2048): 509}
# TensorRT-LLM v0.5.0 blog (H100vsA100.md @15ed780): GPT-J 6B, ISL 128, first-token latency of batch 64 (ms)
# and output tokens/s of batch 1.
BLOG = {"h100x1-llama2-7b-fp8": (102.0, 185.0), "a100x1-llama2-7b-fp16": (481.0, 111.0)}


def timer_for(scenario_file: Path, model=None, max_seqs: int | None = None, tp: int | None = None) -> IterationTimer:
    """The serving iteration timer of a scenario, optionally with another model, max_seqs or tp (GPUs as many)."""
    if model is None and max_seqs is None and tp is None:
        scenario, file = load_serving_scenario(scenario_file)
        return IterationTimer(prepare_serving(scenario, file))
    data = yaml.safe_load(scenario_file.read_text())
    if model is not None:
        data["model"] = model
    if max_seqs is not None:
        data["serving"]["max_seqs"] = max_seqs
    if tp is not None:
        data["serving"]["tp"] = data["cluster"]["gpus"] = tp
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(data, f)
    scenario, file = load_serving_scenario(f.name)
    return IterationTimer(prepare_serving(scenario, file))


def prefill_parts(timer: IterationTimer, prompt: int) -> dict[str, float]:
    """Seconds of one request's prefill (batch 1, one output token), by component; they sum to 'total'."""
    shard, gpu = timer.setup.shard, timer.setup.gpu
    layers = shard.model.num_layers
    work = iteration_work([(prompt, prompt, True)])
    gemms = layers * sum(_gemm_s(prompt, n, k, gpu, shard.weights, WEIGHT_BYTES[shard.weights])
                         for n, k in block_gemms(shard))
    blocks = layers * block_dense_s(prompt, shard, gpu)
    attention = attention_iteration_s(work, shard, gpu)
    head = head_time_s(work.sampled, shard, gpu)
    total = timer.of_entries([(prompt, prompt, True)])
    peak = gpu.bf16_flop_per_s * gpu.training_clock_fraction * flash_efficiency(gpu, "flash")
    kv_token = 2.0 * shard.kv_heads_per_gpu * shard.head_dim * KV_BYTES[shard.kv_cache]
    parts = {"gemms": gemms, "block_rest": blocks - gemms, "attention": attention,
             "attn_flop_roof": layers * 4.0 * shard.head_dim * shard.heads_per_gpu * work.prefill_pairs / peak,
             "attn_kv_roof": layers * work.prefill_kv_tokens * kv_token / gpu.read_bw_bytes_per_s,
             "head": head, "host": timer.host_s}
    parts["rest"] = total - timer.host_s - blocks - attention - head     # embedding, all-reduces
    parts["total"] = total
    return parts


def case_rows() -> list[str]:
    rows = ["| case | measured | predicted | error | GEMMs | rest of blocks | attention (FLOP roof / KV roof) "
            "| head | all-reduce, embedding | host |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in load_cases():
        if not case.id.startswith("trtllm-v05-"):
            continue
        prompt = int(case.id.rsplit("-", 1)[1])
        p = {k: v * 1e3 for k, v in prefill_parts(timer_for(ROOT / "validation" / case.scenario), prompt).items()}
        measured = case.measured * 1e3
        rows.append(f"| {case.id} | {measured:.0f} | {p['total']:.1f} | {100 * (p['total'] - measured) / measured:+.0f}% "
                    f"| {p['gemms']:.1f} | {p['block_rest']:.1f} | {p['attention']:.1f} ({p['attn_flop_roof']:.1f} / "
                    f"{p['attn_kv_roof']:.1f}) | {p['head']:.2f} | {p['rest']:.1f} | {p['host']:.1f} |")
    return rows


def gptj_rows() -> list[str]:
    rows = ["| GPT-J 6B, Falcon 180B (not cases) | measured | predicted | error |", "|---|---:|---:|---:|"]
    for (setup, prompt), measured in GPTJ_TTFT_MS.items():
        timer = timer_for(ROOT / "validation" / "scenarios" / f"trtllm-v05-{setup}-ttft-{prompt}.yaml", GPTJ)
        ms = timer.of_entries([(prompt, prompt, True)]) * 1e3
        rows.append(f"| {setup.split('-')[0]} first token, {prompt} tokens, batch 1 | {measured} ms | {ms:.1f} ms "
                    f"| {100 * (ms - measured) / measured:+.0f}% |")
    for setup, (ttft64, tok_s) in BLOG.items():
        timer = timer_for(ROOT / "validation" / "scenarios" / f"trtllm-v05-{setup}-ttft-128.yaml", GPTJ, 64)
        ms = timer.of_entries([(128, 128, True)] * 64) * 1e3
        step = timer.of_entries([(1, 192, True)])
        rows.append(f"| {setup.split('-')[0]} first token, 128 tokens, batch 64 (blog) | {ttft64:.0f} ms | {ms:.1f} ms "
                    f"| {100 * (ms - ttft64) / ttft64:+.0f}% |")
        rows.append(f"| {setup.split('-')[0]} batch-1 output rate (blog; one decode step at 192 tokens) "
                    f"| {tok_s:.0f} tok/s | {1 / step:.0f} tok/s | {100 * (1 / step - tok_s) / tok_s:+.0f}% |")
    for (setup, prompt), measured in FALCON_TTFT_MS.items():
        timer = timer_for(ROOT / "validation" / "scenarios" / f"trtllm-v05-{setup}-ttft-{prompt}.yaml", FALCON, tp=8)
        ms = timer.of_entries([(prompt, prompt, True)]) * 1e3
        rows.append(f"| Falcon 180B tp 8, {setup.split('x')[0]} first token, {prompt} tokens, batch 1 | {measured} ms "
                    f"| {ms:.1f} ms | {100 * (ms - measured) / measured:+.0f}% |")
    return rows


if __name__ == "__main__":
    print("\n".join(case_rows()))
    print()
    print("\n".join(gptj_rows()))
