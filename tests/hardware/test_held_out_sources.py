"""No catalog source cites a measurement source that is held out for the independent accuracy check.

The held-out list lives in shared/validation/README.md ("Held-out sources: never calibrate, fit or
tune on these"); it is restated here as a constant, one pattern per item, so the test does not
depend on that file's wording or location.
"""

from __future__ import annotations

import re

import pytest

from scalesim.hardware import gpus, links

_LAMBDA = r"(lambdal|deeplearning-benchmark)"
_ISSUE = r"(/issues/|/pull/| ?#| issues? #?)"

# (what is held out, a case-insensitive pattern that a citation of it matches)
HELD_OUT_SOURCES: tuple[tuple[str, str], ...] = (
    ("vTrain's ground-truth iteration times", r"vTrain"),
    ("Megatron-LM README 2020 weak-scaling rows, 128-way data parallel", r"Megatron-LM.*(weak.scaling|128-way)"),
    ("Megatron-Core H100 weak-scaling table", r"Megatron-Core.*weak.scaling"),
    ("MosaicML llm-foundry H100 benchmark table", r"llm-foundry.*H100|H100.*llm-foundry"),
    ("NeMo performance tables, GPT-3 175B and Llama 3 8B",
     r"NeMo.*perf.*(GPT-?3 175B|Llama ?3 8B)|(GPT-?3 175B|Llama ?3 8B).*NeMo.*perf"),
    ("Llama 3 paper Table 4", r"Llama ?3.*Table 4"),
    ("BLOOM-176B training logs", r"BLOOM"),
    ("Lambda deeplearning-benchmark rows: H100 PCIe, A100 80GB PCIe, 2x RTX 4090, 8x H100",
     _LAMBDA + r".*(H100[^,;)]*PCIe|A100 80GB PCIe|2x ?(RTX ?)?4090|8x ?H100)"),
    ("nccl-tests issues #100, #149, #309", r"nccl-tests" + _ISSUE + r"(100|149|309)\b"),
    ("tinygrad open-gpu-kernel-modules issue #36", r"open-gpu-kernel-modules" + _ISSUE + r"36\b"),
    ("sglang benchmark/ folders", r"sglang.*benchmark"),
    ("LMSYS blog", r"lmsys"),
    ("lmdeploy benchmark docs", r"lmdeploy"),
    ("XiongjieDai/GPU-Benchmarks-on-LLM-Inference", r"GPU-Benchmarks-on-LLM-Inference"),
    ("mlc-ai/llm-perf-bench", r"llm-perf-bench"),
    ("AutoAWQ README speed tables", r"AutoAWQ"),
    ("NVIDIA NIM LLM performance pages", r"\bNIM\b"),
    ("ROCm/vllm dev-docker figures", r"dev-docker"),
    ("text-generation-inference docs", r"text-generation-inference"),
    ("FlagPerf training READMEs", r"FlagPerf"),
    ("ms-swift benchmark docs", r"ms-swift"),
    ("Skywork-MoE paper", r"Skywork"),
    ("DeepSeek-V2 paper", r"DeepSeek-V2"),
    ("JetMoE paper", r"JetMoE"),
    ("MegaScale-MoE paper", r"MegaScale-MoE"),
    ("MegaBlocks end-to-end training results", r"MegaBlocks"),
    ("Megatron-LM issue #756", r"Megatron-LM" + _ISSUE + r"756\b"),
    ("torchtune README tables", r"torchtune"),
    ("Hugging Face blog, RAM-efficient FSDP fine-tuning of Llama 2 70B", r"ram-efficient"),
)


def _held_out(text: str) -> list[str]:
    return [what for what, pattern in HELD_OUT_SOURCES if re.search(pattern, text, re.IGNORECASE)]


def _catalog_sources():
    for kind, table in (("gpu", gpus()), ("link", links())):
        for name, spec in table.items():
            for source in spec.source:
                yield f"{kind} {name}", source


def test_no_catalog_source_cites_a_held_out_source():
    cited = [(entry, source, _held_out(source)) for entry, source in _catalog_sources() if _held_out(source)]
    assert cited == []


@pytest.mark.parametrize("text", [
    "lambdal/deeplearning-benchmark pytorch-train-throughput-fp16.csv (H100 80GB PCIe Gen5, 350 W, price 30918)",
    "lambdal/deeplearning-benchmark pytorch/results/8xH100_SXM5/PyTorch_bert_large_squad_FP16",
    "https://github.com/NVIDIA/nccl-tests/issues/309",
    "NVIDIA/nccl-tests#149 (8x A100 all_reduce)",
    "https://github.com/tinygrad/open-gpu-kernel-modules/issues/36",
    "NVIDIA/NeMo performance_summary.md (GPT-3 175B, 128 GPUs)",
])
def test_the_patterns_catch_citations_of_held_out_sources(text):
    assert _held_out(text)


@pytest.mark.parametrize("text", [
    "lambdal/deeplearning-benchmark pytorch-train-throughput-fp16.csv (A100 80GB SXM4, 400 W, price 16250)",
    "https://github.com/NVIDIA/nccl-tests/issues/175 (8x A100 all_reduce 232.54 GB/s busbw)",
    "https://github.com/tinygrad/open-gpu-kernel-modules/issues/29",
    "https://chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-bandwidth/ (H100 PCIe on Lambda Cloud)",
])
def test_the_patterns_leave_other_sources_alone(text):
    assert _held_out(text) == []
