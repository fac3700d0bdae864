"""Model zoo: parameter counts against published ones, FLOP formulas, inline validation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim.errors import InputError
from scalesim.models import LayerSpec, ModelSpec, get_model, model_info, model_names
from scalesim.models.resnet import build_resnet
from scalesim.models.transformer import block_activation_bytes

# Exact counts published by the reference implementations.
EXACT = {
    "gpt2-124m": 124_439_808,        # HF openai-community/gpt2, num_parameters()
    "gpt2-350m": 354_823_168,        # HF gpt2-medium
    "gpt2-774m": 774_030_080,        # HF gpt2-large
    "gpt2-1.5b": 1_557_611_200,      # HF gpt2-xl
    "llama2-7b": 6_738_415_616,      # HF meta-llama/Llama-2-7b-hf
    "llama3-8b": 8_030_261_248,      # HF meta-llama/Meta-Llama-3-8B
    "vit-b16": 86_567_656,           # torchvision vit_b_16 (ImageNet-1k head)
    "vit-l16": 304_326_632,          # torchvision vit_l_16
    "resnet50": 25_557_032,          # torchvision resnet50
    "resnet152": 60_192_808,         # torchvision resnet152
    # Hugging Face num_parameters() of the checkpoints each zoo entry cites (config.json shapes)
    "mistral-7b": 7_241_732_096,     # mistralai/Mistral-7B-v0.1
    "qwen2.5-7b": 7_615_616_512,     # Qwen/Qwen2.5-7B
    "qwen2.5-14b": 14_770_033_664,   # Qwen/Qwen2.5-14B
    "qwen2.5-32b": 32_763_876_352,   # Qwen/Qwen2.5-32B
    "qwen2.5-72b": 72_706_203_648,   # Qwen/Qwen2.5-72B
    "gemma2-9b": 9_241_705_984,      # google/gemma-2-9b
    "gemma2-27b": 27_227_128_320,    # google/gemma-2-27b
    "llama3.2-1b": 1_235_814_400,    # meta-llama/Llama-3.2-1B
    "llama3.2-3b": 3_212_749_824,    # meta-llama/Llama-3.2-3B
    "phi-3-mini": 3_821_079_552,     # microsoft/Phi-3-mini-4k-instruct
    # NVIDIA DLE BertForQuestionAnswering (vocab padded to 30528, pooler kept): Lambda's run log
    # pytorch/results/A100_80GB_SXM4_v1/PyTorch_bert_large_squad_FP16/19-11-2022_18-45-37.txt
    "bert-large-qa": 335_150_082,
}

# Nominal sizes from the papers' tables; we require agreement within 2%.
NOMINAL = {
    "gpt3-1.3b": 1.3e9, "gpt3-2.7b": 2.7e9, "gpt3-6.7b": 6.7e9,        # Brown et al. 2020, Table 2.1
    "gpt3-13b": 13.0e9, "gpt3-175b": 175.0e9,
    "llama2-13b": 13e9, "llama2-70b": 70e9,                            # Touvron et al. 2023, Table 1
    "llama3-70b": 70e9, "llama3-405b": 405e9,                          # Llama 3 Herd, Table 3
    "bert-base": 110e6, "bert-large": 340e6,                           # Devlin et al. 2019, Sec. 3
    "vit-b16": 86e6, "vit-l16": 307e6,                                 # Dosovitskiy et al. 2021, Table 1
}


def model(name: str, seq_len: int | None = None) -> ModelSpec:
    return get_model(name, seq_len=seq_len)


def test_all_required_names_are_in_the_zoo():
    required = ["gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b",
                "gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
                "llama3-405b", "bert-base", "bert-large", "vit-b16", "vit-l16", "resnet50", "resnet152",
                # fine-tuning (issue 21)
                "mistral-7b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "gemma2-9b",
                "gemma2-27b", "llama3.2-1b", "llama3.2-3b", "phi-3-mini",
                # mixtures of experts (issue 22)
                "mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "deepseek-v3-mtp",
                "gpt-oss-20b", "gpt-oss-120b", "llama4-scout",
                # the SQuAD fine-tuning model Lambda's benchmark runs (issue 17)
                "bert-large-qa"]
    assert sorted(model_names()) == sorted(required)


@pytest.mark.parametrize("name,published", EXACT.items())
def test_params_match_published_exactly(name, published):
    assert model(name).params == published


@pytest.mark.parametrize("name,nominal", NOMINAL.items())
def test_params_within_2_percent_of_nominal(name, nominal):
    assert abs(model(name).params / nominal - 1) < 0.02


def test_bert_large_body_matches_hf_and_heads_are_the_pretraining_heads():
    # HF bert-large-uncased (BertModel incl. pooler): 335,141,888. Our head layer adds
    # BertForPreTraining's MLM transform (h*h+h), its LayerNorm (2h), decoder bias (vocab,
    # weights tied to the embeddings) and NSP classifier (2h+2).
    h, v = 1024, 30522
    pretraining_only = (h * h + h) + 2 * h + v + (2 * h + 2)
    assert model("bert-large").params - pretraining_only == 335_141_888


def test_tied_and_untied_heads():
    gpt2, llama = model("gpt2-124m"), model("llama2-7b")
    assert gpt2.layers[-1].params == 0                     # GPT-2 ties the LM head to wte
    assert llama.layers[-1].params == 32000 * 4096         # Llama unties
    assert gpt2.layers[-1].ops[0].gemm_mnk == (1024, 50257, 768)


@pytest.mark.parametrize("name", [n for n in model_names() if not n.startswith(("vit", "resnet"))])
def test_palm_model_flop_formula(name):
    m = model(name)
    s, n = m.tokens_per_sample, m.active_params          # MoE: the parameters a token goes through
    per_token = 6 * n + 12 * m.num_layers * m.hidden * s          # PaLM, Appendix B
    assert m.model_flop_per_sample == pytest.approx(per_token * s, rel=1e-12)
    assert m.model_flop_per_sample - 6 * n * s == pytest.approx(12 * m.num_layers * m.hidden * s * s)


@pytest.mark.parametrize("name", ["vit-b16", "resnet50"])
def test_vision_models_count_three_forwards_and_ignore_seq_len(name):
    m = model(name, seq_len=77)
    assert m.tokens_per_sample is None
    assert m == model(name)
    assert m.model_flop_per_sample == pytest.approx(3 * sum(layer.forward_flop for layer in m.layers))


def test_vit_has_197_tokens_at_224():
    qkv = model("vit-b16").layers[1].ops[1]
    assert qkv.name == "qkv" and qkv.gemm_mnk == (197, 3 * 768, 768)


def test_resnet_forward_flop_near_published_macs():
    # torchvision reports 4.09 / 11.51 GFLOPS (counting multiply-adds once); we count 2 per MAC
    # and include BN, ReLU and pooling, so we land a little above 2x.
    assert 2 * 4.09e9 < sum(layer.forward_flop for layer in build_resnet(50).layers) < 2 * 4.09e9 * 1.03
    assert 2 * 11.51e9 < sum(layer.forward_flop for layer in build_resnet(152).layers) < 2 * 11.51e9 * 1.03


def test_resnet_layer_counts_are_modest():
    assert len(build_resnet(50).layers) == 18 and len(build_resnet(152).layers) == 52


@pytest.mark.parametrize("name", model_names())
def test_gemm_and_conv_flop_are_2mnk_and_ops_are_sane(name):
    for layer in model(name).layers:
        assert isinstance(layer, LayerSpec) and layer.params >= 0 and layer.activation_bytes >= 0
        for op in layer.ops:
            assert op.flop >= 0 and op.elements_moved > 0
            if op.kind in ("gemm", "conv"):
                m, n, k = op.gemm_mnk
                assert op.flop == 2 * m * n * k * op.groups      # grouped GEMMs: groups of m x n x k
            else:
                assert op.gemm_mnk is None


def test_doubling_seq_len_quadruples_attention_and_more_than_doubles_forward():
    short, long = model("gpt2-124m", 512), model("gpt2-124m", 1024)

    def attention(m):
        return sum(op.flop for layer in m.layers for op in layer.ops if op.kind == "attention")

    assert attention(long) == 4 * attention(short)                 # 4*s^2*h per block
    fwd = [sum(layer.forward_flop for layer in m.layers) for m in (short, long)]
    assert fwd[1] > 2 * fwd[0]
    assert long.params == short.params                              # position table is fixed


def test_block_activations_follow_korthikanti():
    s, h, a = 1024, 768, 12
    block = model("gpt2-124m").layers[1]
    assert block.activation_bytes == 34 * s * h                     # eq. 1, b=1, t=1
    assert block.attention_score_bytes == 5 * a * s * s
    # GQA stores smaller K and V; swiglu stores three ffn-wide tensors.
    assert block_activation_bytes(s, h, h // 4, 4 * h, "gelu") < 34 * s * h


def test_attention_moves_q_k_v_o():
    m = model("llama3-8b", 4096)
    attn = next(op for op in m.layers[1].ops if op.kind == "attention")
    s, h, kv_dim = 4096, 4096, 8 * 128
    assert attn.flop == 4 * s * s * h
    assert attn.elements_moved == 2 * s * h + 2 * s * kv_dim


def test_gqa_reduces_qkv_params():
    base = {"kind": "transformer", "layers": 4, "hidden": 512, "heads": 8, "vocab": 1000}
    mha = get_model(base, seq_len=128)
    gqa = get_model({**base, "kv_heads": 2}, seq_len=128)
    kv_saved = 2 * 512 * (512 - 2 * 64) + 2 * (512 - 2 * 64)        # k, v weights and biases
    assert mha.params - gqa.params == 4 * kv_saved
    assert gqa.kv_heads == 2 and mha.kv_heads == 8


def test_inline_defaults_and_styles():
    spec = {"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100}
    gelu = get_model(spec, seq_len=16)
    swiglu = get_model({**spec, "ffn": "swiglu", "ffn_hidden": 128, "tied_embeddings": True}, seq_len=16)
    assert gelu.family == "inline" and gelu.tokens_per_sample == 16
    up = next(op for op in gelu.layers[1].ops if op.name == "mlp_up")
    assert up.gemm_mnk == (16, 256, 64)                              # ffn_hidden defaults to 4*hidden
    assert swiglu.layers[-1].params == 0
    assert [op.name for op in swiglu.layers[1].ops if op.kind == "gemm"] == [
        "qkv", "attn_out", "mlp_gate", "mlp_up", "mlp_down"]


GOOD = {"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100}


@pytest.mark.parametrize("spec,key,words", [
    ({**GOOD, "hiden": 64}, "model.hiden", "Did you mean 'hidden'"),
    ({**GOOD, "moe_spec": {}}, "model.moe_spec", "Did you mean 'moe'"),     # as close as errors.did_you_mean asks
    ({k: v for k, v in GOOD.items() if k != "vocab"}, "model.vocab", "required"),
    ({**GOOD, "layers": 0}, "model.layers", "positive integer"),
    ({**GOOD, "hidden": -64}, "model.hidden", "positive integer"),
    ({**GOOD, "vocab": 10.5}, "model.vocab", "positive integer"),
    ({**GOOD, "layers": True}, "model.layers", "positive integer"),
    ({**GOOD, "heads": 5}, "model.heads", "must divide hidden"),
    ({**GOOD, "kv_heads": 3}, "model.kv_heads", "must divide heads"),
    ({**GOOD, "ffn": "relu"}, "model.ffn", "gelu or swiglu"),
    ({**GOOD, "tied_embeddings": "yes"}, "model.tied_embeddings", "true or false"),
    ({**GOOD, "kind": "cnn"}, "model.kind", "kind: transformer"),
    ({k: v for k, v in GOOD.items() if k != "kind"}, "model.kind", "kind: transformer"),
])
def test_inline_errors_name_the_key(spec, key, words):
    with pytest.raises(InputError) as err:
        get_model(spec, seq_len=128, file="s.yaml")
    assert err.value.key == key and err.value.file == "s.yaml"
    assert words in str(err.value)


def test_inline_errors_use_the_given_key_prefix():
    with pytest.raises(InputError) as err:
        get_model({**GOOD, "heads": 5}, seq_len=128, key="models[1]")
    assert err.value.key == "models[1].heads"
    assert "4, 8" in str(err.value)                                 # nearby divisors of 64


def test_inline_needs_seq_len():
    with pytest.raises(InputError) as err:
        get_model(GOOD, seq_len=None)
    assert err.value.key == "training.seq_len"


@pytest.mark.parametrize("name,seq_len", [("gpt2-124m", 2048), ("bert-base", 513), ("gpt3-175b", 4096)])
def test_seq_len_beyond_learned_positions_is_an_error(name, seq_len):
    with pytest.raises(InputError) as err:
        get_model(name, seq_len=seq_len)
    assert err.value.key == "training.seq_len" and "learned position" in str(err.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "1024", True])
def test_bad_seq_len(bad):
    with pytest.raises(InputError) as err:
        get_model("llama2-7b", seq_len=bad)
    assert err.value.key == "training.seq_len"


def test_rotary_models_accept_longer_sequences_and_defaults_are_context_lengths():
    assert model("llama3-8b", 32768).tokens_per_sample == 32768
    defaults = {"gpt2-124m": 1024, "gpt3-13b": 2048, "llama2-70b": 4096, "llama3-405b": 8192, "bert-large": 512}
    for name, s in defaults.items():
        assert model(name).tokens_per_sample == s


def test_unknown_name_suggests_the_closest():
    with pytest.raises(InputError) as err:
        get_model("gpt2-125m", seq_len=None, key="model", file="x.yaml")
    assert err.value.key == "model"
    assert "Did you mean 'gpt2-124m'" in str(err.value)
    with pytest.raises(InputError, match="zoo model name"):
        get_model(42, seq_len=None)


def test_model_info_lists_every_model_with_a_source():
    rows = model_info()
    assert [r["name"] for r in rows] == model_names()
    for r in rows:
        assert r["params"] > 0 and r["source"] and r["description"] and r["family"]


@st.composite
def inline_transformers(draw):
    heads = draw(st.integers(1, 16))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    spec = {"kind": "transformer", "layers": draw(st.integers(1, 6)),
            "hidden": heads * draw(st.integers(1, 64)), "heads": heads, "kv_heads": kv_heads,
            "vocab": draw(st.integers(1, 5000)), "ffn": draw(st.sampled_from(["gelu", "swiglu"])),
            "tied_embeddings": draw(st.booleans())}
    if draw(st.booleans()):
        spec["ffn_hidden"] = draw(st.integers(1, 1024))
    return spec, draw(st.integers(1, 256))


@settings(max_examples=60, deadline=None)
@given(inline_transformers())
def test_inline_params_positive_and_grow_with_hidden_and_layers(case):
    spec, s = case
    m = get_model(spec, seq_len=s)
    assert m.params > 0 and m.model_flop_per_sample > 0
    wider = get_model({**spec, "hidden": spec["hidden"] + spec["heads"]}, seq_len=s)
    deeper = get_model({**spec, "layers": spec["layers"] + 1}, seq_len=s)
    assert wider.params > m.params and deeper.params > m.params
    assert len(deeper.layers) == len(m.layers) + 1


def test_bert_squad_head_holds_no_vocabulary_logits():
    """The SQuAD span head scores 2 classes a position: its activations do not grow with the vocabulary,
    unlike the pre-training heads' MLM logits (4 bytes a position and vocabulary entry)."""
    qa, pre = model("bert-large-qa", seq_len=384), model("bert-large", seq_len=384)
    assert qa.layers[-1].activation_bytes < 384 * 1024 * 4 < 384 * pre.vocab * 4 < pre.layers[-1].activation_bytes
    assert [layer.activation_bytes for layer in qa.layers[1:-1]] == [layer.activation_bytes for layer in pre.layers[1:-1]]


def test_attention_without_dropout_keeps_no_dropout_mask_or_output():
    """Score kernels set what a block keeps: without dropout (HF OPT) neither the scores' 1-byte mask nor
    their 2-byte dropout output is kept; the clamp keeps its 2-byte input: a*s^2 bytes less than the default."""
    from scalesim.models.packing import attention_score_ops

    base = model("gpt2-124m", seq_len=512)
    opt = attention_score_ops(base, ("mask_add", "clamp", "softmax"))
    heads = 12
    assert base.layers[1].attention_score_bytes - opt.layers[1].attention_score_bytes == 1 * heads * 512 * 512
    no_clamp = attention_score_ops(base, ("mask_add", "softmax"))
    assert no_clamp.layers[1].attention_score_bytes == 2 * heads * 512 * 512


def test_dle_squad_bert_runs_its_eager_copies_and_hidden_dropouts():
    """NVIDIA DLE's BERT (modeling.py) copies q, k, v and the context around its batched matmuls and
    runs dropout after the embedding and after both residual branches: the SQuAD model's embedding and
    blocks move more bytes than the same shapes without them, with the same weights and GEMMs, and the
    extra kernels are memory-bound (no matmul FLOP)."""
    qa, pre = model("bert-large-qa", seq_len=384), model("bert-large", seq_len=384)
    names = [op.name for op in qa.layers[1].ops]
    assert names.index("qkv") < names.index("attention_layout") < names.index("attention")
    assert names.index("attn_out") < names.index("dropout_attn") < names.index("residual_attn")
    assert names.index("mlp_down") < names.index("dropout_mlp") < names.index("residual_mlp")
    assert "dropout_embedding" in [op.name for op in qa.layers[0].ops]
    assert "dropout_attn" not in [op.name for op in pre.layers[1].ops]
    for mine, plain in zip(qa.layers[:-1], pre.layers[:-1]):
        assert sum(op.elements_moved for op in mine.ops) > sum(op.elements_moved for op in plain.ops)
        gemms = [op.flop for op in mine.ops if op.kind in ("gemm", "attention")]
        assert gemms == [op.flop for op in plain.ops if op.kind in ("gemm", "attention")]
    extra = [op for op in qa.layers[1].ops if op.name in ("attention_layout", "dropout_attn", "dropout_mlp")]
    assert all(op.kind == "elementwise" and op.backward_elements == op.elements_moved for op in extra)


def test_dle_squad_bert_reduces_each_bias_gradient_in_backward_only():
    """Autograd reduces each linear's bias gradient from its s x n output gradient in a kernel of its own:
    backward only, reading every biased GEMM's output once (n summed over the block's GEMMs)."""
    block = model("bert-large-qa", seq_len=384).layers[1]
    grads = [op for op in block.ops if op.name == "bias_grads"]
    assert len(grads) == 1 and grads[0].backward_only and grads[0].flop == 0
    assert grads[0].elements_moved == sum(op.gemm_mnk[0] * op.gemm_mnk[1] for op in block.ops if op.kind == "gemm")
