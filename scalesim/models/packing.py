"""BERT pre-training as MLPerf's NVIDIA code runs it: packed sequences and a masked-only MLM head.

Two mechanisms of NVIDIA's MLPerf Training BERT (mlcommons/training_results_v4.0
NVIDIA/benchmarks/bert/implementations/*/: run_pretraining.py flags `--packed_samples`,
`--pad_fmha`, `--dense_seq_output`; each config_*.sh sets PACKING_FACTOR):

- Packed sequences (Krell et al. 2021, "Efficient Sequence Packing without
  Cross-contamination", arXiv:2107.02027): several sequences share one seq_len row and
  attention is block-diagonal, each token attending only within its own sequence (the
  FMHA kernels take the per-sequence offsets). A row of k sequences of lengths L_i does
  sum(L_i^2) of the s^2 score work; taken here with equal lengths s/k, i.e. s^2/k: the
  least the split allows (an uneven split does more, up to s^2), so this is a lower
  bound on the attention work. The linear layers see every token either way.
- The MLM head on masked positions only (`--dense_seq_output`): the reference's data
  masks masked_lm_prob = 0.15 of tokens, at most max_predictions_per_seq = 76 per
  512-token sequence (mlcommons/training language_model/tensorflow/bert/cleanup_scripts
  create_pretraining_data.py flags, used for the MLPerf dataset); the head's transform,
  decoder GEMM and loss run on those rows only (`bert_pretraining_head(mlm_rows=...)`).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import DEFAULT_SCORE_SAVED_BYTES, SCORE_OP_SAVED_BYTES, ModelSpec
from scalesim.models.transformer import bert_pretraining_head


def packed_attention(model: ModelSpec, sequences: int) -> ModelSpec:
    """`model` with each sample's row holding `sequences` packed sequences of equal length:
    attention FLOP and score elements divided by `sequences` (block-diagonal attention).

    >>> from scalesim.models.zoo import get_model
    >>> bert = get_model("bert-large", seq_len=512)
    >>> packed = packed_attention(bert, 2)
    >>> packed.layers[1].forward_flop < bert.layers[1].forward_flop
    True
    """
    if sequences < 1:
        raise ValueError(f"sequences per packed row must be >= 1, not {sequences}")
    if sequences == 1:
        return model
    layers = tuple(replace(layer, ops=tuple(
        replace(op, flop=op.flop / sequences, score_elements=op.score_elements / sequences)
        if op.kind == "attention" else op for op in layer.ops),
        attention_score_bytes=layer.attention_score_bytes / sequences) for layer in model.layers)
    return replace(model, layers=layers)


def fp8_attention(model: ModelSpec) -> ModelSpec:
    """`model` with its attention kernels running FP8 (Transformer Engine's FP8 dot-product attention,
    NeMo `fp8_dot_product_attention`; its cost is in costs/flash.py fp8_speedup and costs/part_attention.py).

    >>> from scalesim.models.zoo import get_model
    >>> llama = fp8_attention(get_model("llama2-7b", seq_len=512))
    >>> all(op.fp8 for layer in llama.layers for op in layer.ops if op.kind == "attention")
    True
    """
    return with_attention_fields(model, fp8=True)


def sliding_window(model: ModelSpec, window: int, every: int) -> ModelSpec:
    """`model` whose decoder blocks attend over a sliding window of `window` earlier keys, except every
    `every`-th block (1-based), which keeps full causal attention; `every` 0: every block windowed.
    Megatron-Core's is_layer_window_attention, `layer_number % window_attn_skip_freq != 0` (NVIDIA/Megatron-LM
    megatron/core/transformer/utils.py). gpt-oss: window 128, every other block full (Megatron Bridge
    GPTOSSProvider window_size (128, 0), window_attn_skip_freq 2; Hugging Face config.json layer_types,
    sliding_window 128). FLOP keep the full s^2 (as causal masks do); the kernels' cost reads the window
    (costs/flash.py window_share).

    >>> from scalesim.models.zoo import get_model
    >>> m = sliding_window(get_model("llama3.2-1b", seq_len=4096), 128, 2)
    >>> [op.window for layer in m.layers[1:5] for op in layer.ops if op.kind == "attention"]
    [128, 0, 128, 0]
    >>> m = sliding_window(get_model("llama3.2-1b", seq_len=4096), 128, 0)
    >>> {op.window for layer in m.layers for op in layer.ops if op.kind == "attention"}
    {128}
    """
    if window < 1 or every < 0:
        raise ValueError(f"a sliding window needs window >= 1 and every >= 0, not {window}, {every}")
    blocks = [i for i, layer in enumerate(model.layers) if any(op.kind == "attention" for op in layer.ops)]
    windowed = {i for n, i in enumerate(blocks, start=1) if not every or n % every}
    layers = tuple(replace(layer, ops=tuple(replace(op, window=window) if op.kind == "attention" else op
                                            for op in layer.ops)) if i in windowed else layer
                   for i, layer in enumerate(model.layers))
    return replace(model, layers=layers)


def masked_lm_head(model: ModelSpec, rows: int) -> ModelSpec:
    """A BERT model whose MLM head runs on `rows` (masked) positions per sample instead of all.

    >>> from scalesim.models.zoo import get_model
    >>> bert = get_model("bert-large", seq_len=512)
    >>> masked_lm_head(bert, 76).layers[-1].forward_flop < bert.layers[-1].forward_flop
    True
    """
    s = model.tokens_per_sample
    if model.family != "bert" or s is None:
        raise ValueError(f"a masked-LM head needs a BERT model, not {model.name!r}")
    if not 1 <= rows <= s:
        raise ValueError(f"masked positions per sample must be in 1..{s}, not {rows}")
    head = bert_pretraining_head(s, model.hidden, model.vocab, mlm_rows=rows)
    return replace(model, layers=tuple(head if layer.name == head.name else layer for layer in model.layers))


def attention_score_ops(model: ModelSpec, score_ops: tuple[str, ...]) -> ModelSpec:
    """`model` whose eager (naive) attention runs `score_ops` on its scores (OpSpec.score_ops,
    priced by costs/score_ops.py); flash attention ignores them, fused takes only whether dropout runs. The scores each block keeps
    for backward follow the kernels (SCORE_OP_SAVED_BYTES): Hugging Face OPT's clamp and softmax keep
    4 bytes a score, no dropout mask or output, against the default's 5.

    >>> from scalesim.models.zoo import get_model
    >>> opt = attention_score_ops(get_model("gpt2-124m", seq_len=512), ("mask_add", "clamp", "softmax"))
    >>> {op.score_ops for layer in opt.layers for op in layer.ops if op.kind == "attention"}
    {('mask_add', 'clamp', 'softmax')}
    >>> opt.layers[1].attention_score_bytes / get_model("gpt2-124m", seq_len=512).layers[1].attention_score_bytes
    0.8
    """
    saved = sum(SCORE_OP_SAVED_BYTES[name] for name in score_ops) / DEFAULT_SCORE_SAVED_BYTES
    kept = replace(model, layers=tuple(
        replace(layer, attention_score_bytes=layer.attention_score_bytes * saved)
        if any(op.kind == "attention" for op in layer.ops) else layer for layer in model.layers))
    return with_attention_fields(kept, score_ops=tuple(score_ops))


def with_attention_fields(model: ModelSpec, **fields) -> ModelSpec:
    """`model` with `fields` set on every attention op, the other ops as they are."""
    layers = tuple(replace(layer, ops=tuple(replace(op, **fields) if op.kind == "attention" else op
                                            for op in layer.ops)) for layer in model.layers)
    return replace(model, layers=layers)
