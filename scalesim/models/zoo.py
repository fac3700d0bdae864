"""The model zoo: named models with their published configurations, and inline transformers.

>>> get_model("llama2-7b", seq_len=None).params             # Touvron et al. 2023 "7B"
6738415616
>>> get_model({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100},
...           seq_len=32).family
'inline'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from scalesim.errors import InputError, did_you_mean, unknown_name
from scalesim.models.moe import ROUTERS, MLASpec
from scalesim.models.resnet import build_resnet
from scalesim.models.packing import attention_score_ops, sliding_window
from scalesim.models.windows import SLIDING_WINDOWS
from scalesim.models.spec import SCORE_OPS, ModelSpec, MoESpec
from scalesim.models.transformer import build_transformer, build_vit

GPT2_SOURCE = "Radford et al. 2019, GPT-2; Hugging Face configs openai-community/gpt2{,-medium,-large,-xl}"
GPT3_SOURCE = "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1"
LLAMA2_SOURCE = "Touvron et al. 2023, 'Llama 2', Table 1; HF meta-llama/Llama-2-*-hf config.json"
LLAMA3_SOURCE = "Llama Team 2024, 'The Llama 3 Herd of Models', Table 3; HF meta-llama/Llama-3.1-* config.json"
BERT_SOURCE = "Devlin et al. 2019, BERT, Sec. 3; HF google-bert/bert-*-uncased config.json"
BERT_DLE_SQUAD_SOURCE = ("NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT run_squad.py and modeling.py "
                         "BertForQuestionAnswering; Lambda deeplearning-benchmark run log (335,150,082 weights)")
VIT_SOURCE = "Dosovitskiy et al. 2021, ViT, Table 1; torchvision vit_b_16 / vit_l_16"
HF = "https://huggingface.co/{}/blob/main/config.json"
MISTRAL_SOURCE = "Jiang et al. 2023, 'Mistral 7B', Table 1; " + HF.format("mistralai/Mistral-7B-v0.1")
QWEN25_SOURCE = "Qwen Team 2024, 'Qwen2.5 Technical Report', Table 1; " + HF.format("Qwen/Qwen2.5-{}")
GEMMA2_SOURCE = "Gemma Team 2024, 'Gemma 2', Table 1; " + HF.format("google/gemma-2-{}")
LLAMA32_SOURCE = "Meta 2024, Llama 3.2 model card; " + HF.format("meta-llama/Llama-3.2-{}")
PHI3_SOURCE = "Abdin et al. 2024, 'Phi-3 Technical Report', sec. 2; " + HF.format("microsoft/Phi-3-mini-4k-instruct")
MIXTRAL_SOURCE = "Jiang et al. 2024, 'Mixtral of Experts', Table 1; " + HF.format("mistralai/Mixtral-{}-v0.1")
QWEN3_SOURCE = "Qwen Team 2025, 'Qwen3 Technical Report', Table 2; " + HF.format("Qwen/Qwen3-{}")
DEEPSEEK_V3_SOURCE = ("DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', sec. 4.2 (671B total, 37B activated); "
                      + HF.format("deepseek-ai/DeepSeek-V3"))
GPT_OSS_SOURCE = "OpenAI 2025, 'gpt-oss-120b & gpt-oss-20b Model Card', Table 1; " + HF.format("openai/gpt-oss-{}")
LLAMA4_SOURCE = "Meta 2025, Llama 4 model card (Scout: 17B active, 109B total); " + HF.format(
    "meta-llama/Llama-4-Scout-17B-16E")
RESNET_SOURCE = "He et al. 2015, 'Deep Residual Learning', Table 1; torchvision resnet50 / resnet152 (v1.5)"

# Family defaults; per-model shapes below.
_GPT2 = dict(vocab=50257, max_positions=1024, tied_embeddings=True)     # learned positions, biases, LN
_GPT3 = dict(vocab=50257, max_positions=2048, tied_embeddings=True)     # as GPT-2 (paper Sec. 2.1)
_LLAMA = dict(ffn="swiglu", bias=False, norm="rmsnorm", tied_embeddings=False)  # rotary positions
_QWEN25 = dict(vocab=152064, qkv_bias=True, **_LLAMA)      # Qwen2: biases on q, k, v only
_GEMMA2 = dict(vocab=256000, ffn="swiglu", bias=False, norm="rmsnorm", tied_embeddings=True,
               sandwich_norm=True, final_softcap=30.0)       # GeGLU has SwiGLU's shape; 4 norms a block
_MOE = dict(ffn="swiglu", bias=False, norm="rmsnorm", tied_embeddings=False)
_QWEN3_MOE = dict(vocab=151936, head_dim=128, **_MOE)          # q/k RMSNorms (2 x 128 per block) left out
_GPT_OSS = dict(vocab=201088, heads=64, kv_heads=8, head_dim=64, hidden=2880, ffn="swiglu", bias=True,
                norm="rmsnorm", tied_embeddings=False)           # attention sinks (64 per block) left out
_BERT = dict(vocab=30522, max_positions=512, token_types=2, post_norm=True, head="bert")


@dataclass(frozen=True, slots=True)
class _Entry:
    family: str                     # gpt2 | gpt3 | llama2 | llama3 | bert | vit | resnet
    published: str                  # the size as published, for the listing
    description: str
    source: tuple[str, ...]
    config: dict                    # builder keyword arguments
    seq_len: int | None = None      # default training sequence length: the context length
    max_seq_len: int | None = None  # learned position table size; None = no hard limit (rotary)
    score_ops: tuple[str, ...] | None = None    # OpSpec.score_ops of its attention (None: the default)


def _tok(family, published, description, source, seq_len, config, learned=True, score_ops=None) -> _Entry:
    return _Entry(family, published, description, (source,), config, seq_len, seq_len if learned else None,
                  score_ops)


# DeepSeek-V3's architecture, with and without its multi-token-prediction module.
_DEEPSEEK_V3 = dict(layers=61, hidden=7168, heads=128, vocab=129280, ffn_hidden=18432,
                    moe=MoESpec(256, 8, 2048, shared_experts=1, router="sigmoid", first_dense=3, groups=8,
                                group_topk=4),       # node-limited routing (report sec. 2.1.2; n_group, topk_group)
                    mla=MLASpec(1536, 512, 128, 64, 128), **_MOE)
# Gemma 2's eager attention (transformers modular_gemma2.py @213da5a0): scale, logit soft-capping, mask, softmax
_GEMMA2_SCORE_OPS = ("scale", "scale", "tanh", "scale", "mask_add", "softmax")   # cap: / 50, tanh, * 50; p = 0
# Attention dropout 0.0 (HF config.json "attention_dropout": 0.0; NeMo DeepSeekConfig @7a8f1cc7): no dropout
# kernel on materialised scores (PyTorch runs none at p = 0), only the scale, mask and softmax.
_DEEPSEEK_SCORE_OPS = ("scale", "mask_add", "softmax")

_ZOO: dict[str, _Entry] = {
    "gpt2-124m": _tok("gpt2", "124,439,808 (HF gpt2)", "GPT-2 small, 12 x 768", GPT2_SOURCE, 1024,
                      dict(layers=12, hidden=768, heads=12, **_GPT2)),
    "gpt2-350m": _tok("gpt2", "354,823,168 (HF gpt2-medium)", "GPT-2 medium, 24 x 1024", GPT2_SOURCE, 1024,
                      dict(layers=24, hidden=1024, heads=16, **_GPT2)),
    "gpt2-774m": _tok("gpt2", "774,030,080 (HF gpt2-large)", "GPT-2 large, 36 x 1280", GPT2_SOURCE, 1024,
                      dict(layers=36, hidden=1280, heads=20, **_GPT2)),
    "gpt2-1.5b": _tok("gpt2", "1,557,611,200 (HF gpt2-xl)", "GPT-2 XL, 48 x 1600", GPT2_SOURCE, 1024,
                      dict(layers=48, hidden=1600, heads=25, **_GPT2)),
    "gpt3-1.3b": _tok("gpt3", "1.3B", "GPT-3 XL, 24 x 2048, dense attention", GPT3_SOURCE, 2048,
                      dict(layers=24, hidden=2048, heads=16, **_GPT3)),
    "gpt3-2.7b": _tok("gpt3", "2.7B", "GPT-3 2.7B, 32 x 2560, dense attention", GPT3_SOURCE, 2048,
                      dict(layers=32, hidden=2560, heads=32, **_GPT3)),
    "gpt3-6.7b": _tok("gpt3", "6.7B", "GPT-3 6.7B, 32 x 4096, dense attention", GPT3_SOURCE, 2048,
                      dict(layers=32, hidden=4096, heads=32, **_GPT3)),
    # Table 2.1 prints d_model 5140 for 13B, which 40 heads of d_head 128 contradict: 40*128 = 5120.
    "gpt3-13b": _tok("gpt3", "13.0B", "GPT-3 13B, 40 x 5120, dense attention", GPT3_SOURCE, 2048,
                     dict(layers=40, hidden=5120, heads=40, **_GPT3)),
    "gpt3-175b": _tok("gpt3", "175.0B", "GPT-3 175B, 96 x 12288, dense attention", GPT3_SOURCE, 2048,
                      dict(layers=96, hidden=12288, heads=96, **_GPT3)),
    "llama2-7b": _tok("llama2", "6,738,415,616 (HF Llama-2-7b-hf)", "Llama 2 7B, 32 x 4096", LLAMA2_SOURCE,
                      4096, dict(layers=32, hidden=4096, heads=32, vocab=32000, ffn_hidden=11008, **_LLAMA),
                      learned=False),
    "llama2-13b": _tok("llama2", "13B", "Llama 2 13B, 40 x 5120", LLAMA2_SOURCE, 4096,
                       dict(layers=40, hidden=5120, heads=40, vocab=32000, ffn_hidden=13824, **_LLAMA),
                       learned=False),
    "llama2-70b": _tok("llama2", "70B", "Llama 2 70B, 80 x 8192, GQA 8 kv heads", LLAMA2_SOURCE, 4096,
                       dict(layers=80, hidden=8192, heads=64, kv_heads=8, vocab=32000, ffn_hidden=28672,
                            **_LLAMA), learned=False),
    "llama3-8b": _tok("llama3", "8,030,261,248 (HF Meta-Llama-3-8B)", "Llama 3 8B, 32 x 4096, GQA 8 kv heads",
                      LLAMA3_SOURCE, 8192, dict(layers=32, hidden=4096, heads=32, kv_heads=8, vocab=128256,
                                                ffn_hidden=14336, **_LLAMA), learned=False),
    "llama3-70b": _tok("llama3", "70B", "Llama 3 70B, 80 x 8192, GQA 8 kv heads", LLAMA3_SOURCE, 8192,
                       dict(layers=80, hidden=8192, heads=64, kv_heads=8, vocab=128256, ffn_hidden=28672,
                            **_LLAMA), learned=False),
    "llama3-405b": _tok("llama3", "405B", "Llama 3 405B, 126 x 16384, GQA 8 kv heads", LLAMA3_SOURCE, 8192,
                        dict(layers=126, hidden=16384, heads=128, kv_heads=8, vocab=128256, ffn_hidden=53248,
                             **_LLAMA), learned=False),
    # Fine-tuning favourites (issue 21); sliding windows of Mistral 7B v0.1, Gemma 2, Phi-3: models/windows.py.
    "mistral-7b": _tok("mistral", "7,241,732,096 (HF Mistral-7B-v0.1)", "Mistral 7B v0.1, 32 x 4096, GQA 8 kv heads",
                       MISTRAL_SOURCE, 8192, dict(layers=32, hidden=4096, heads=32, kv_heads=8, vocab=32000,
                                                  ffn_hidden=14336, **_LLAMA), learned=False),
    "qwen2.5-7b": _tok("qwen2.5", "7,615,616,512 (HF Qwen2.5-7B)", "Qwen2.5 7B, 28 x 3584, GQA 4 kv heads",
                       QWEN25_SOURCE.format("7B"), 32768,
                       dict(layers=28, hidden=3584, heads=28, kv_heads=4, ffn_hidden=18944, **_QWEN25),
                       learned=False),
    "qwen2.5-14b": _tok("qwen2.5", "14,770,033,664 (HF Qwen2.5-14B)", "Qwen2.5 14B, 48 x 5120, GQA 8 kv heads",
                        QWEN25_SOURCE.format("14B"), 32768,
                        dict(layers=48, hidden=5120, heads=40, kv_heads=8, ffn_hidden=13824, **_QWEN25),
                        learned=False),
    "qwen2.5-32b": _tok("qwen2.5", "32,763,876,352 (HF Qwen2.5-32B)", "Qwen2.5 32B, 64 x 5120, GQA 8 kv heads",
                        QWEN25_SOURCE.format("32B"), 32768,
                        dict(layers=64, hidden=5120, heads=40, kv_heads=8, ffn_hidden=27648, **_QWEN25),
                        learned=False),
    "qwen2.5-72b": _tok("qwen2.5", "72,706,203,648 (HF Qwen2.5-72B)", "Qwen2.5 72B, 80 x 8192, GQA 8 kv heads",
                        QWEN25_SOURCE.format("72B"), 32768,
                        dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=29568, **_QWEN25),
                        learned=False),
    "gemma2-9b": _tok("gemma2", "9,241,705,984 (HF gemma-2-9b)", "Gemma 2 9B, 42 x 3584, 16 heads of 256, GQA 8",
                      GEMMA2_SOURCE.format("9b"), 8192,
                      dict(layers=42, hidden=3584, heads=16, kv_heads=8, head_dim=256, ffn_hidden=14336,
                           **_GEMMA2), learned=False, score_ops=_GEMMA2_SCORE_OPS),
    "gemma2-27b": _tok("gemma2", "27,227,128,320 (HF gemma-2-27b)", "Gemma 2 27B, 46 x 4608, 32 heads of 128, GQA 16",
                       GEMMA2_SOURCE.format("27b"), 8192,
                       dict(layers=46, hidden=4608, heads=32, kv_heads=16, head_dim=128, ffn_hidden=36864,
                            **_GEMMA2), learned=False, score_ops=_GEMMA2_SCORE_OPS),
    "llama3.2-1b": _tok("llama3", "1,235,814,400 (HF Llama-3.2-1B)", "Llama 3.2 1B, 16 x 2048, GQA 8, tied embeddings",
                        LLAMA32_SOURCE.format("1B"), 131072,
                        dict(layers=16, hidden=2048, heads=32, kv_heads=8, vocab=128256, ffn_hidden=8192,
                             **{**_LLAMA, "tied_embeddings": True}), learned=False),
    "llama3.2-3b": _tok("llama3", "3,212,749,824 (HF Llama-3.2-3B)", "Llama 3.2 3B, 28 x 3072, GQA 8, tied embeddings",
                        LLAMA32_SOURCE.format("3B"), 131072,
                        dict(layers=28, hidden=3072, heads=24, kv_heads=8, vocab=128256, ffn_hidden=8192,
                             **{**_LLAMA, "tied_embeddings": True}), learned=False),
    "phi-3-mini": _tok("phi3", "3,821,079,552 (HF Phi-3-mini-4k-instruct)", "Phi-3 mini 4k, 32 x 3072, fused qkv and gate-up",
                       PHI3_SOURCE, 4096, dict(layers=32, hidden=3072, heads=32, vocab=32064, ffn_hidden=8192,
                                               **_LLAMA), learned=False),
    # Mixtures of experts (issue 22); gpt-oss's sliding windows: models/windows.py. Llama 4's chunked attention
    # is not modelled: every layer attends over the whole sequence.
    "mixtral-8x7b": _tok("mixtral", "46.7B total, 12.9B active", "Mixtral 8x7B, 32 x 4096, 8 experts top-2, GQA 8",
                         MIXTRAL_SOURCE.format("8x7B"), 32768,
                         dict(layers=32, hidden=4096, heads=32, kv_heads=8, vocab=32000, ffn_hidden=14336,
                              moe=MoESpec(8, 2, 14336), **_MOE), learned=False),
    "mixtral-8x22b": _tok("mixtral", "141B total, 39B active", "Mixtral 8x22B, 56 x 6144, 8 experts top-2, GQA 8",
                          MIXTRAL_SOURCE.format("8x22B"), 65536,
                          dict(layers=56, hidden=6144, heads=48, kv_heads=8, vocab=32768, ffn_hidden=16384,
                               moe=MoESpec(8, 2, 16384), **_MOE), learned=False),
    "qwen3-30b-a3b": _tok("qwen3", "30.5B total, 3.3B active", "Qwen3-30B-A3B, 48 x 2048, 128 experts top-8, GQA 4",
                          QWEN3_SOURCE.format("30B-A3B"), 32768,
                          dict(layers=48, hidden=2048, heads=32, kv_heads=4, ffn_hidden=768,
                               moe=MoESpec(128, 8, 768), **_QWEN3_MOE), learned=False),
    "qwen3-235b-a22b": _tok("qwen3", "235B total, 22B active", "Qwen3-235B-A22B, 94 x 4096, 128 experts top-8, GQA 4",
                            QWEN3_SOURCE.format("235B-A22B"), 32768,
                            dict(layers=94, hidden=4096, heads=64, kv_heads=4, ffn_hidden=1536,
                                 moe=MoESpec(128, 8, 1536), **_QWEN3_MOE), learned=False),
    # 61 blocks, the first 3 dense (18432 wide); MLA; 1 shared + 256 routed experts of 2048, top-8,
    # sigmoid routing with the auxiliary-loss-free bias. The multi-token-prediction module (14B,
    # HF's 685B total) is left out, as the paper's 671B does.
    "deepseek-v3": _tok("deepseek", "671B total, 37B active",
                        "DeepSeek-V3, 61 x 7168, MLA, 1 shared + 256 routed top-8",
                        DEEPSEEK_V3_SOURCE, 4096,
                        _DEEPSEEK_V3, learned=False, score_ops=_DEEPSEEK_SCORE_OPS),
    # With its multi-token-prediction module (1 depth, sec. 2.2: the 14B of HF's 685B), as NeMo's
    # DeepSeek-V3 pre-training recipe runs it (nemo/collections/llm/recipes/deepseek_v3.py, use_mtp=True).
    "deepseek-v3-mtp": _tok("deepseek", "671B + 14B MTP", "DeepSeek-V3 with its multi-token-prediction module",
                            DEEPSEEK_V3_SOURCE, 4096,
                            dict(_DEEPSEEK_V3, mtp_layers=1), learned=False, score_ops=_DEEPSEEK_SCORE_OPS),
    "gpt-oss-20b": _tok("gpt-oss", "20.9B total, 3.6B active", "gpt-oss-20b, 24 x 2880, 32 experts top-4, GQA 8",
                        GPT_OSS_SOURCE.format("20b"), 131072,
                        dict(layers=24, ffn_hidden=2880, moe=MoESpec(32, 4, 2880), **_GPT_OSS), learned=False),
    "gpt-oss-120b": _tok("gpt-oss", "116.8B total, 5.1B active", "gpt-oss-120b, 36 x 2880, 128 experts top-4, GQA 8",
                         GPT_OSS_SOURCE.format("120b"), 131072,
                         dict(layers=36, ffn_hidden=2880, moe=MoESpec(128, 4, 2880), **_GPT_OSS), learned=False),
    # Text model only (the vision encoder is not modelled): 16 routed experts top-1 plus a shared one.
    "llama4-scout": _tok("llama4", "109B total, 17B active",
                         "Llama 4 Scout, 48 x 5120, 16 experts top-1 + 1 shared, GQA 8",
                         LLAMA4_SOURCE, 8192,
                         dict(layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128, vocab=202048,
                              ffn_hidden=8192, moe=MoESpec(16, 1, 8192, shared_experts=1), **_MOE), learned=False),
    "bert-base": _tok("bert", "110M", "BERT base, 12 x 768, MLM+NSP pre-training heads", BERT_SOURCE, 512,
                      dict(layers=12, hidden=768, heads=12, **_BERT)),
    "bert-large": _tok("bert", "335,141,888 (HF bert-large-uncased, with pooler)",
                       "BERT large, 24 x 1024, MLM+NSP pre-training heads", BERT_SOURCE, 512,
                       dict(layers=24, hidden=1024, heads=16, **_BERT)),
    # BertForQuestionAnswering as NVIDIA DLE's run_squad.py builds it: the vocabulary padded to a multiple
    # of 8 (30528, run_squad.py "Padding for divisibility by 8"), the pooler kept, the span head instead of
    # the pre-training heads. 335,150,082 is the count Lambda's run log prints (validation/cases.yaml notes).
    "bert-large-qa": _tok("bert", "335,150,082 (NVIDIA DLE BertForQuestionAnswering)",
                          "BERT large, 24 x 1024, SQuAD span head (NVIDIA DLE run_squad.py)", BERT_DLE_SQUAD_SOURCE,
                          512, dict(layers=24, hidden=1024, heads=16, **{**_BERT, "vocab": 30528, "head": "bert-qa",
                                                                                   "eager_bert": True})),
    "vit-b16": _Entry("vit", "86M (torchvision 86,567,656)", "ViT-B/16 at 224x224 (197 tokens), 1000 classes",
                      (VIT_SOURCE,), config=dict(layers=12, hidden=768, heads=12)),
    "vit-l16": _Entry("vit", "307M (torchvision 304,326,632)", "ViT-L/16 at 224x224 (197 tokens), 1000 classes",
                      (VIT_SOURCE,), config=dict(layers=24, hidden=1024, heads=16)),
    "resnet50": _Entry("resnet", "25,557,032 (torchvision)", "ResNet-50 at 224x224, 1000 classes",
                       (RESNET_SOURCE,), config=dict(depth=50)),
    "resnet152": _Entry("resnet", "60,192,808 (torchvision)", "ResNet-152 at 224x224, 1000 classes",
                        (RESNET_SOURCE,), config=dict(depth=152)),
}

VISION_FAMILIES = ("vit", "resnet")


def model_names() -> list[str]:
    """Names of the zoo's models, in catalog order."""
    return list(_ZOO)


def model_info() -> list[dict]:
    """One record per zoo model for a `scalesim models` listing."""
    rows = []
    for name, entry in _ZOO.items():
        spec = get_model(name, seq_len=None)
        rows.append({"name": name, "family": entry.family, "params": spec.params,
                     "active_params": spec.active_params,
                     "published_params": entry.published, "seq_len": spec.tokens_per_sample,
                     "description": entry.description, "source": "; ".join(entry.source)})
    return rows


@lru_cache(maxsize=64)
def _build_zoo(name: str, seq_len: int | None) -> ModelSpec:
    entry = _ZOO[name]
    if entry.family == "resnet":
        return build_resnet(source=entry.source, **entry.config)
    if entry.family == "vit":
        return build_vit(name, source=entry.source, **entry.config)
    model = build_transformer(name, seq_len=seq_len, family=entry.family, source=entry.source, **entry.config)
    model = sliding_window(model, *SLIDING_WINDOWS[name]) if name in SLIDING_WINDOWS else model
    return model if entry.score_ops is None else attention_score_ops(model, entry.score_ops)


def get_model(spec: str | Mapping, *, seq_len: int | None, key: str | None = None,
              file: str | None = None) -> ModelSpec:
    """The ModelSpec for a zoo name or an inline transformer mapping.

    seq_len: training sequence length of token models (None: the model's
      context length); vision models ignore it. `key` is where `spec` sits in
      the scenario (default 'model'); errors name the key beneath it.
    """
    key = key or "model"
    if isinstance(spec, str):
        if spec not in _ZOO:
            raise unknown_name("model", spec, model_names(), key=key, file=file)
        entry = _ZOO[spec]
        if entry.family in VISION_FAMILIES:
            return _build_zoo(spec, None)
        s = entry.seq_len if seq_len is None else _check_seq_len(seq_len, file)
        if entry.max_seq_len is not None and s > entry.max_seq_len:
            raise InputError(f"{spec} has {entry.max_seq_len} learned position embeddings; seq_len "
                             f"{s} is too long (allowed: 1..{entry.max_seq_len})",
                             key="training.seq_len", file=file)
        return _build_zoo(spec, s)
    if isinstance(spec, Mapping):
        return _inline(spec, seq_len, key, file)
    raise InputError(f"expected a zoo model name or a mapping with kind: transformer, got "
                     f"{type(spec).__name__}; zoo names: {', '.join(model_names())}", key=key, file=file)


# ------------------------------------------------------------------ inline models

_REQUIRED = ("layers", "hidden", "heads", "vocab")
_OPTIONAL = ("kv_heads", "head_dim", "ffn_hidden", "ffn", "tied_embeddings", "name", "moe", "attention_score_ops")
_MOE_KEYS = ("experts", "top_k", "expert_ffn_hidden", "shared_experts", "every", "capacity_factor", "router")
_ALLOWED = ("kind",) + _REQUIRED + _OPTIONAL


def _check_seq_len(seq_len: Any, file: str | None) -> int:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise InputError(f"must be a positive integer (tokens per sample), got {seq_len!r}",
                         key="training.seq_len", file=file)
    return seq_len


def _positive_int(spec: Mapping, name: str, key: str, file: str | None) -> int:
    value = spec[name]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"must be a positive integer, got {value!r}", key=f"{key}.{name}", file=file)
    return value


def _divisors_near(n: int, near: int, count: int = 5) -> str:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(str(d) for d in sorted(sorted(divisors, key=lambda d: abs(d - near))[:count]))


def _inline(spec: Mapping, seq_len: int | None, key: str, file: str | None) -> ModelSpec:
    """Validate an inline transformer and build it.

    gelu models are GPT-style (LayerNorm, biases); swiglu models are Llama-style
    (RMSNorm, no biases). Both use rotary positions, so their parameter count
    does not depend on seq_len.
    """
    for name in spec:
        if name not in _ALLOWED:
            raise InputError(f"unknown key '{name}' for an inline model.{did_you_mean(name, _ALLOWED)} "
                             f"Allowed: {', '.join(_ALLOWED)}", key=f"{key}.{name}", file=file)
    if spec.get("kind") != "transformer":
        got = "missing" if "kind" not in spec else f"{spec['kind']!r}"
        raise InputError(f"inline models need kind: transformer (got {got}); or use a zoo name: "
                         f"{', '.join(model_names())}", key=f"{key}.kind", file=file)
    for name in _REQUIRED:
        if name not in spec:
            raise InputError(f"required for an inline transformer (needs {', '.join(_REQUIRED)})",
                             key=f"{key}.{name}", file=file)
    layers, hidden, heads, vocab = (_positive_int(spec, n, key, file) for n in _REQUIRED)
    kv_heads = _positive_int(spec, "kv_heads", key, file) if "kv_heads" in spec else heads
    ffn_hidden = _positive_int(spec, "ffn_hidden", key, file) if "ffn_hidden" in spec else 4 * hidden
    ffn = spec.get("ffn", "gelu")
    if ffn not in ("gelu", "swiglu"):
        raise InputError(f"must be gelu or swiglu, got {ffn!r}", key=f"{key}.ffn", file=file)
    if not isinstance(tied := spec.get("tied_embeddings", False), bool):
        raise InputError(f"must be true or false, got {tied!r}", key=f"{key}.tied_embeddings", file=file)
    model_name = spec.get("name", "inline-transformer")
    if not isinstance(model_name, str) or not model_name:
        raise InputError(f"must be a non-empty string, got {model_name!r}", key=f"{key}.name", file=file)
    head_dim = _positive_int(spec, "head_dim", key, file) if "head_dim" in spec else None   # config.json's
    if head_dim is None and hidden % heads:
        raise InputError(f"heads ({heads}) must divide hidden ({hidden}); allowed nearby: "
                         f"{_divisors_near(hidden, heads)}", key=f"{key}.heads", file=file)
    if heads % kv_heads:
        raise InputError(f"kv_heads ({kv_heads}) must divide heads ({heads}); allowed nearby: "
                         f"{_divisors_near(heads, kv_heads)}", key=f"{key}.kv_heads", file=file)
    if seq_len is None:
        raise InputError("required for an inline transformer (it has no default context length)",
                         key="training.seq_len", file=file)
    llama_style = ffn == "swiglu"
    moe = _inline_moe(spec["moe"], ffn_hidden, f"{key}.moe", file) if spec.get("moe") is not None else None
    score_ops = spec.get("attention_score_ops")
    if score_ops is not None and (not isinstance(score_ops, list) or not all(o in SCORE_OPS for o in score_ops)):
        raise InputError(f"must be a list of the eager kernels run on the attention scores, each one of "
                         f"{', '.join(SCORE_OPS)}; got {score_ops!r}", key=f"{key}.attention_score_ops", file=file)
    model = build_transformer(model_name, seq_len=_check_seq_len(seq_len, file), layers=layers, hidden=hidden,
                              heads=heads, vocab=vocab, kv_heads=kv_heads, ffn_hidden=ffn_hidden, ffn=ffn,
                              tied_embeddings=tied, bias=not llama_style,
                              norm="rmsnorm" if llama_style else "layernorm",
                              family="inline", source=("inline model from the scenario",), moe=moe, head_dim=head_dim)
    return model if score_ops is None else attention_score_ops(model, tuple(score_ops))


def _inline_moe(spec: Any, ffn_hidden: int, key: str, file: str | None) -> MoESpec:
    """An inline model's `moe:` mapping (experts are SwiGLU MLPs, whatever the dense ffn)."""
    if not isinstance(spec, Mapping):
        raise InputError(f"must be a mapping with keys {', '.join(_MOE_KEYS)}", key=key, file=file)
    for name in spec:
        if name not in _MOE_KEYS:
            raise InputError(f"unknown key '{name}'; allowed: {', '.join(_MOE_KEYS)}", key=f"{key}.{name}", file=file)
    for name in ("experts", "top_k"):
        if name not in spec:
            raise InputError("required for an MoE model", key=f"{key}.{name}", file=file)
    experts, top_k = _positive_int(spec, "experts", key, file), _positive_int(spec, "top_k", key, file)
    if top_k > experts:
        raise InputError(f"top_k ({top_k}) cannot exceed experts ({experts}); allowed: 1..{experts}",
                         key=f"{key}.top_k", file=file)
    width = _positive_int(spec, "expert_ffn_hidden", key, file) if "expert_ffn_hidden" in spec else ffn_hidden
    shared = spec.get("shared_experts", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise InputError(f"must be a whole number >= 0, got {shared!r}", key=f"{key}.shared_experts", file=file)
    every = _positive_int(spec, "every", key, file) if "every" in spec else 1
    capacity = spec.get("capacity_factor")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or capacity < 1):
        raise InputError(f"must be null or a number >= 1, got {capacity!r}", key=f"{key}.capacity_factor", file=file)
    router = spec.get("router", "topk")
    if router not in ROUTERS:
        raise InputError(f"must be one of {', '.join(ROUTERS)}, got {router!r}", key=f"{key}.router", file=file)
    return MoESpec(experts, top_k, width, shared_experts=shared, every=every,
                   capacity_factor=None if capacity is None else float(capacity), router=router)
