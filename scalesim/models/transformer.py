"""Transformer builders: decoders (GPT-2/3, Llama) and encoders (BERT, ViT).

Each builder is a pure function returning a frozen ModelSpec: one sample's
forward pass, layer by layer. Shapes follow the Hugging Face / torchvision
implementations, so parameter counts match theirs exactly. Notation:

    s tokens per sample, h hidden, a heads, g kv_heads, d = h/a head dim,
    f ffn_hidden, v vocab, L blocks.

>>> gpt2 = build_transformer("gpt2-124m", seq_len=1024, layers=12, hidden=768, heads=12,
...                          vocab=50257, max_positions=1024, tied_embeddings=True)
>>> gpt2.params                       # HF "gpt2": 124,439,808
124439808
>>> gpt2.layers[1].activation_bytes == 34 * 1024 * 768   # Korthikanti eq. 1
True
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec
from scalesim.models.softcap import SOFTCAP_SAVED_BYTES, final_softcap_ops

# FLOP per element of the memory-bound ops. Rough counts: these ops are timed by
# elements_moved, so their FLOP barely matter; they are counted to be non-zero.
LAYERNORM_FLOP_PER_ELEMENT = 5     # mean, variance, normalise, scale, shift
RMSNORM_FLOP_PER_ELEMENT = 4       # square, mean, normalise, scale
GELU_FLOP_PER_ELEMENT = 8          # tanh approximation 0.5x(1+tanh(c(x+0.044715x^3)))
SWIGLU_FLOP_PER_ELEMENT = 5        # silu(gate) = gate*sigmoid(gate), times up
ROPE_FLOP_PER_ELEMENT = 3          # x*cos + rotate_half(x)*sin
SOFTMAX_FLOP_PER_ELEMENT = 5       # max, subtract, exp, sum, divide (or log)

NORMS = ("layernorm", "rmsnorm", "batchnorm")
FFNS = ("gelu", "swiglu")


# ----------------------------------------------------------------------------- ops

def gemm_op(name: str, m: int, n: int, k: int, *, bias: bool = False) -> OpSpec:
    """A dense layer y[m,n] = x[m,k] @ w[k,n] (+ b): 2*m*n*k forward FLOP.

    Elements moved: input, weight and output, plus the bias when there is one
    (its add is fused into the GEMM epilogue and its FLOP are not counted).

    >>> op = gemm_op("fc1", 1024, 3072, 768, bias=True)
    >>> op.flop == 2 * 1024 * 3072 * 768, op.gemm_mnk
    (True, (1024, 3072, 768))
    """
    moved = m * k + k * n + m * n + (n if bias else 0)
    return OpSpec(name, "gemm", 2.0 * m * n * k, float(moved), (m, n, k))


def elementwise_op(name: str, n: int, *, inputs: int = 1, flop_per_element: float = 1) -> OpSpec:
    """An element-wise op over n output elements reading `inputs` tensors of n elements."""
    return OpSpec(name, "elementwise", float(flop_per_element * n), float((inputs + 1) * n))


def norm_params(width: int, norm: str) -> int:
    """Parameters of one normalisation over `width` features (LayerNorm/BatchNorm: weight and
    bias; RMSNorm: weight only)."""
    return width if norm == "rmsnorm" else 2 * width


def norm_op(name: str, n: int, width: int, norm: str) -> OpSpec:
    """A norm over n elements of `width` features: reads and writes n, plus its weights."""
    per = RMSNORM_FLOP_PER_ELEMENT if norm == "rmsnorm" else LAYERNORM_FLOP_PER_ELEMENT
    return OpSpec(name, "norm", float(per * n), float(2 * n + norm_params(width, norm)))


# ---------------------------------------------------------------------- formulas

def palm_model_flop_per_sample(params: int, layers: int, hidden: int, seq_len: int) -> float:
    """Model FLOP (forward + backward) of one sample of seq_len tokens as MFU counts them.

    PaLM (Chowdhery et al. 2022), Appendix B: 6*N + 12*L*H*Q*T per token with
    H*Q = hidden and T = seq_len; N = all parameters; times seq_len tokens.

    >>> palm_model_flop_per_sample(1000, 2, 8, 4) == (6 * 1000 + 12 * 2 * 8 * 4) * 4
    True
    """
    return float((6 * params + 12 * layers * hidden * seq_len) * seq_len)


def block_activation_bytes(s: int, h: int, kv_dim: int, f: int, ffn: str) -> float:
    """Bytes a transformer block stores for backward, one sample, 16-bit, no recomputation,
    excluding the attention scores (see `attention_score_bytes`).

    Korthikanti et al. 2022, "Reducing Activation Recomputation", Sec. 4.1,
    term by term (dropout masks 1 byte/element, kept as in the paper):
      attention: QKV input 2sh, Q 2sh, K and V 2*2*s*kv_dim, out-proj input 2sh,
        dropout mask sh                                 -> 7sh + 4*s*kv_dim
      MLP (gelu): up input 2sh, gelu input 2sf, down input 2sf, mask sh
        -> 3sh + 4sf; (swiglu): gate and up outputs 2sf each, their product 2sf
        -> 3sh + 6sf
      two norms: inputs 2sh each                        -> 4sh
    With kv_dim = h and f = 4h (GPT) this is eq. 1's 34*s*h:

    >>> block_activation_bytes(2048, 1024, 1024, 4096, "gelu") == 34 * 2048 * 1024
    True
    """
    mlp = 3 * s * h + (4 if ffn == "gelu" else 6) * s * f
    return float(7 * s * h + 4 * s * kv_dim + mlp + 4 * s * h)


def dropout_op(name: str, n: int) -> OpSpec:
    """PyTorch dropout over n 16-bit elements: reads the input, writes the output and its 1-byte
    mask (2.5 element passes); its backward reads the gradient and the mask and writes (2.5)."""
    return OpSpec(name, "elementwise", float(n), 2.5 * n, backward_elements=2.5 * n)


def eager_bert_ops(s: int, h: int, q_dim: int, kv_dim: int, f: int) -> dict[str, tuple[OpSpec, ...]]:
    """Kernels eager BERT code runs beyond scalesim's fused block, keyed by the op they follow.

    NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT/modeling.py (BertSelfAttention,
    BertSelfOutput, BertOutput; the code Lambda's SQuAD runs use):
    - `transpose_for_scores` permutes q and v to (b, heads, s, d) and k to (b, heads, d, s) as
      views; torch.matmul folds the batch dimensions with `reshape`, which cannot view a permuted
      tensor and copies q, k and v; `context_layer.permute(0, 2, 1, 3).contiguous()` copies the
      context. Each copy reads and writes its tensor once: 2 (q + 2 kv) + 2 q elements; backward
      copies the four gradients back the same way (PermuteBackward of a non-contiguous gradient
      into the GEMMs' reshapes), as many elements. Named attention_layout, as nanotron's copies
      (costs/nanotron_kernels.py), so tensor parallelism splits it by heads.
    - `self.dropout(hidden_states)` after the attention output and after the MLP's down-projection
      (hidden_dropout_prob 0.1, before the residual add and LayerNorm): `dropout_op` each.
    - Bias gradients: the linears are nn.Linear with biases (the up-projection's bias added in the
      scripted bias_gelu); autograd reduces each bias's gradient from the output gradient, a kernel
      reading the s x n gradient (`sum_to` of the broadcast bias), outside the GEMMs. Backward only:
      s (q + 2 kv + h + f + h) elements, f the MLP width.
    """
    copies = float(2 * s * (q_dim + 2 * kv_dim) + 2 * s * q_dim)
    return {"qkv": (OpSpec("attention_layout", "elementwise", 0.0, copies, backward_elements=copies),),
            "attn_out": (dropout_op("dropout_attn", s * h),),
            "mlp_down": (dropout_op("dropout_mlp", s * h),
                         OpSpec("bias_grads", "elementwise", 0.0, float(s * (q_dim + 2 * kv_dim + 2 * h + f)),
                                backward_only=True))}


def attention_score_bytes(s: int, heads: int) -> float:
    """Korthikanti et al. 2022 eq. 1, the 5*a*s^2 term at b=1: softmax input and output
    (2 bytes each) and dropout mask (1 byte) per score. Flash attention stores none."""
    return float(5 * heads * s * s)


# -------------------------------------------------------------------- layers

def transformer_block(name: str, *, s: int, h: int, heads: int, kv_heads: int, f: int,
                      ffn: str = "gelu", bias: bool = True, norm: str = "layernorm",
                      post_norm: bool = False, rotary: bool = False, causal: bool = True,
                      head_dim: int | None = None, qkv_bias: bool = False,
                      sandwich_norm: bool = False, eager_bert: bool = False) -> LayerSpec:
    """One transformer block for one sample of s tokens.

    Pre-norm (GPT-2/3, Llama, ViT): x + attn(norm(x)), then x + mlp(norm(x)).
    Post-norm (BERT): norm(x + attn(x)), then norm(x + mlp(x)).
    head_dim: when heads x head_dim is not h (Gemma 2). qkv_bias: biases on q, k and v
    only (Qwen2). sandwich_norm: a norm also after attention and after the MLP (Gemma 2).
    eager_bert: the kernels eager BERT code adds (`eager_bert_ops`).
    """
    d = head_dim or h // heads
    q_dim = heads * d
    kv_dim = kv_heads * d
    qkv_n = q_dim + 2 * kv_dim                      # grouped-query attention (Ainslie et al. 2023)
    attn = [gemm_op("qkv", s, qkv_n, h, bias=bias or qkv_bias)]
    if rotary:                                      # RoPE on q and k (Su et al. 2021), no params
        attn.append(elementwise_op("rope", s * (q_dim + kv_dim), flop_per_element=ROPE_FLOP_PER_ELEMENT))
    # Attention core with softmax inside: QK^T 2*s*s*h + AV 2*s*s*h FLOP; full s^2 also for
    # causal masks, as MFU conventions count it. Moves what flash attention reads and
    # writes: q, k, v, o (Dao et al. 2022).
    attn.append(OpSpec("attention", "attention", 4.0 * s * s * q_dim, float(2 * s * q_dim + 2 * s * kv_dim),
                       score_elements=float(heads * s * s), causal=causal, seq=s))
    attn.append(gemm_op("attn_out", s, h, q_dim, bias=bias))
    attn.append(elementwise_op("residual_attn", s * h, inputs=2))

    if ffn == "gelu":
        mlp = [gemm_op("mlp_up", s, f, h, bias=bias),
               elementwise_op("gelu", s * f, flop_per_element=GELU_FLOP_PER_ELEMENT),
               gemm_op("mlp_down", s, h, f, bias=bias)]
        mlp_params = 2 * h * f + ((f + h) if bias else 0)
    elif ffn == "swiglu":                           # Shazeer 2020, "GLU Variants"; Llama
        mlp = [gemm_op("mlp_gate", s, f, h, bias=bias),     # one fc1 GEMM in TE: one FP8 cast of its input
               replace(gemm_op("mlp_up", s, f, h, bias=bias), cast_share=0.0),
               elementwise_op("swiglu", s * f, inputs=2, flop_per_element=SWIGLU_FLOP_PER_ELEMENT),
               gemm_op("mlp_down", s, h, f, bias=bias)]
        mlp_params = 3 * h * f + ((2 * f + h) if bias else 0)
    else:
        raise ValueError(f"ffn must be one of {FFNS}, not {ffn!r}")
    mlp.append(elementwise_op("residual_mlp", s * h, inputs=2))
    if eager_bert:                                  # each extra kernel right after the op it follows
        extra = eager_bert_ops(s, h, q_dim, kv_dim, f)
        attn, mlp = ([x for op in part for x in (op, *extra.get(op.name, ()))]
                     for part in (attn, mlp))

    n1, n2 = norm_op("norm_attn", s * h, h, norm), norm_op("norm_mlp", s * h, h, norm)
    ops = attn + [n1] + mlp + [n2] if post_norm else [n1] + attn + [n2] + mlp
    if sandwich_norm:
        ops = ([n1] + attn[:-1] + [norm_op("norm_attn_post", s * h, h, norm), attn[-1], n2] + mlp[:-1]
               + [norm_op("norm_mlp_post", s * h, h, norm), mlp[-1]])
    attn_params = h * qkv_n + q_dim * h + (qkv_n if bias or qkv_bias else 0) + (h if bias else 0)
    params = attn_params + mlp_params + (4 if sandwich_norm else 2) * norm_params(h, norm)
    return LayerSpec(name, "transformer_block", params, tuple(ops),
                     activation_bytes=block_activation_bytes(s, h, kv_dim, f, ffn),
                     attention_score_bytes=attention_score_bytes(s, heads))


def token_embedding(s: int, h: int, vocab: int, *, max_positions: int | None,
                    token_types: int = 0, norm: str | None = None, dropout: bool = False) -> LayerSpec:
    """Token embedding, plus learned positions (GPT-2/3, BERT) and token types and a
    LayerNorm (BERT). max_positions None means rotary positions (no parameters).

    Activations (Korthikanti et al. 2022, Sec. 4.3): the embedding dropout mask,
    s*h bytes; the lookup itself keeps only the token ids (negligible); BERT's
    embedding LayerNorm keeps its input, 2sh. dropout: the dropout kernel itself runs
    (`dropout_op`; BertEmbeddings' `self.dropout` in eager BERT code, `eager_bert_ops`).
    """
    ops = [OpSpec("token_embedding", "embedding", 0.0, float(s + 2 * s * h))]   # ids, rows, out
    params = vocab * h
    if max_positions is not None:
        ops.append(elementwise_op("position_add", s * h, inputs=2))
        params += max_positions * h
    if token_types:
        ops.append(elementwise_op("token_type_add", s * h, inputs=2))
        params += token_types * h
    act = float(s * h)
    if norm is not None:
        ops.append(norm_op("embedding_norm", s * h, h, norm))
        params += norm_params(h, norm)
        act += 2 * s * h
    if dropout:
        ops.append(dropout_op("dropout_embedding", s * h))
    return LayerSpec("embedding", "embedding", params, tuple(ops), activation_bytes=act)


def final_norm(s: int, h: int, norm: str) -> LayerSpec:
    """The norm after the last block of pre-norm models; keeps its input, 2sh bytes
    (Korthikanti et al. 2022, Sec. 4.3)."""
    return LayerSpec("final_norm", "norm", norm_params(h, norm), (norm_op("final_norm", s * h, h, norm),),
                     activation_bytes=float(2 * s * h))


def _loss_op(rows: int, classes: int) -> OpSpec:
    """Softmax cross-entropy over `classes`: reads logits, writes fp32 probabilities."""
    return OpSpec("cross_entropy", "softmax", float(SOFTMAX_FLOP_PER_ELEMENT * rows * classes),
                  float(2 * rows * classes))


def lm_head(s: int, h: int, vocab: int, *, tied: bool, softcap: float | None = None) -> LayerSpec:
    """Output projection to the vocabulary and the loss. Tied embeddings reuse the
    token-embedding matrix, so 0 parameters here (GPT-2, GPT-3; Llama unties).

    Activations (Korthikanti et al. 2022, Sec. 4.3): projection input 2sh, and the cross-entropy loss keeps the
    logits in fp32, 4*s*v bytes. `softcap`: Gemma 2's final-logit soft-capping between the two (models/softcap.py),
    whose tanh keeps 2*s*v more. (*) 16-bit under FP8: Megatron's output layer is no TE module, torchtitan skips it.
    """
    capped = final_softcap_ops(s, vocab) if softcap else ()
    head = replace(gemm_op("lm_head", s, vocab, h), cast_share=0.0, grad_cast_share=0.0, fp8_excluded=True)  # (*)
    ops = (head, *capped, _loss_op(s, vocab))
    return LayerSpec("lm_head", "head", 0 if tied else vocab * h, ops, activation_bytes=float(
        2 * s * h + 4 * s * vocab + (SOFTCAP_SAVED_BYTES * s * vocab if softcap else 0)))


def bert_pretraining_head(s: int, h: int, vocab: int, mlm_rows: int | None = None) -> LayerSpec:
    """BERT's pooler plus its pre-training heads (HF BertForPreTraining): the MLM head
    (dense h->h + gelu + LayerNorm, then the decoder tied to the word embeddings with
    its own bias, over all s positions as HF computes it) and next-sentence
    prediction (dense h->2 on the pooled [CLS]).

    Activations: MLM dense, gelu, LayerNorm and decoder inputs 2sh each, fp32
    logits 4*s*v (as for `lm_head`), pooler and NSP inputs 2h each.

    mlm_rows: positions the MLM head runs on (None: all s). NVIDIA's MLPerf BERT
    (`--dense_seq_output`) gathers the masked positions first and runs the head on them only.
    """
    s = s if mlm_rows is None else mlm_rows
    ops = (gemm_op("pooler", 1, h, h, bias=True),
           elementwise_op("pooler_tanh", h, flop_per_element=GELU_FLOP_PER_ELEMENT),  # ~ a tanh-GELU
           gemm_op("mlm_transform", s, h, h, bias=True),
           elementwise_op("mlm_gelu", s * h, flop_per_element=GELU_FLOP_PER_ELEMENT),
           norm_op("mlm_norm", s * h, h, "layernorm"),
           gemm_op("mlm_decoder", s, vocab, h, bias=True),
           _loss_op(s, vocab),
           gemm_op("nsp", 1, 2, h, bias=True))
    params = (h * h + h) + (h * h + h) + 2 * h + vocab + (2 * h + 2)
    return LayerSpec("pretraining_head", "head", params, ops,
                     activation_bytes=float(8 * s * h + 4 * s * vocab + 4 * h))


def bert_qa_head(s: int, h: int) -> LayerSpec:
    """BERT's pooler and its SQuAD span head, as NVIDIA DeepLearningExamples' BertForQuestionAnswering
    builds it (PyTorch/LanguageModeling/BERT modeling.py, run by run_squad.py): `qa_outputs`, a dense
    h->2 over every position (start and end logits), each a softmax cross-entropy over the s positions.
    BertModel keeps its pooler (h->h on [CLS]); run_squad.py leaves it out of the optimizer, which
    is not modelled (1M parameters). No vocabulary projection: the MLM and NSP heads are not built.

    Activations: qa_outputs input 2sh, fp32 logits 4*s*2 (as for `lm_head`), pooler input 2h.
    """
    ops = (gemm_op("pooler", 1, h, h, bias=True),
           elementwise_op("pooler_tanh", h, flop_per_element=GELU_FLOP_PER_ELEMENT),
           gemm_op("qa_outputs", s, 2, h, bias=True),
           _loss_op(s, 2))
    return LayerSpec("qa_head", "head", (h * h + h) + (2 * h + 2), ops,
                     activation_bytes=float(2 * s * h + 4 * s * 2 + 2 * h))


# -------------------------------------------------------------------- models

def build_transformer(name: str, *, seq_len: int, layers: int, hidden: int, heads: int, vocab: int,
                      kv_heads: int | None = None, ffn_hidden: int | None = None, ffn: str = "gelu",
                      tied_embeddings: bool = False, bias: bool = True, norm: str = "layernorm",
                      max_positions: int | None = None, post_norm: bool = False,
                      token_types: int = 0, head: str = "lm", family: str = "inline",
                      source: tuple[str, ...] = (), head_dim: int | None = None, qkv_bias: bool = False,
                      sandwich_norm: bool = False, moe=None, mla=None, mtp_layers: int = 0,
                      eager_bert: bool = False, final_softcap: float | None = None) -> ModelSpec:
    """A token transformer (decoder or encoder) built for sequences of seq_len tokens.

    max_positions: size of a learned position table (GPT-2/3, BERT); None for
      rotary positions (Llama), which have no parameters.
    post_norm: BERT's post-LayerNorm blocks, whose extra norm sits in the embedding.
    head: "lm" (projection to vocab + loss), "bert" (pooler, MLM and NSP heads) or "bert-qa"
      (pooler and the SQuAD span head, `bert_qa_head`).
    moe: a `MoESpec` (mixture-of-experts MLP in its MoE blocks); mla: an `MLASpec` (DeepSeek's
      multi-head latent attention); both built by `scalesim.models.moe`. mtp_layers: DeepSeek-V3's
      multi-token-prediction modules after the head (`scalesim.models.moe.mtp_layers`).
    eager_bert: the embedding's and blocks' extra eager kernels (`eager_bert_ops`).
    final_softcap: config.json's final_logit_softcapping (Gemma 2), capping the logits (`lm_head`).

    Arguments are assumed valid (the zoo validates user input); impossible shapes
    raise ValueError.
    """
    kv_heads = heads if kv_heads is None else kv_heads
    f = 4 * hidden if ffn_hidden is None else ffn_hidden
    if (head_dim is None and hidden % heads) or heads % kv_heads or norm not in NORMS or head not in ("lm", "bert", "bert-qa"):
        raise ValueError(f"inconsistent transformer shape for {name!r}")
    s, h = seq_len, hidden
    emb = token_embedding(s, h, vocab, max_positions=max_positions, token_types=token_types,
                          norm=norm if post_norm else None, dropout=eager_bert)
    block = dict(s=s, h=h, heads=heads, kv_heads=kv_heads, f=f, ffn=ffn, bias=bias, norm=norm,
                 post_norm=post_norm, rotary=max_positions is None, causal=head == "lm",
                 head_dim=head_dim, qkv_bias=qkv_bias, sandwich_norm=sandwich_norm)
    if eager_bert:
        block["eager_bert"] = True
    if moe is None and mla is None:
        blocks = [transformer_block(f"block{i}", **block) for i in range(layers)]
    else:
        from scalesim.models.moe import moe_block   # moe builds on this module's blocks
        blocks = [moe_block(f"block{i}", moe=moe if moe is not None and moe.is_moe_layer(i) else None, mla=mla,
                            **block) for i in range(layers)]
    tail = [] if post_norm else [final_norm(s, h, norm)]
    tail.append(lm_head(s, h, vocab, tied=tied_embeddings, softcap=final_softcap) if head == "lm"
                else bert_qa_head(s, h) if head == "bert-qa" else bert_pretraining_head(s, h, vocab))
    all_layers = (emb, *blocks, *tail)
    if mtp_layers:
        from scalesim.models.moe import moe_block, mtp_layers as mtp_module
        last = moe_block("mtp", moe=moe, mla=mla, **block)
        for k in range(mtp_layers):
            all_layers += mtp_module(k, embedding=emb, block=last, final=tail[0], head=tail[-1], s=s, h=h)
    # MoE: N in 6N counts the parameters a token goes through (active), as MoE MFU is reported
    # (Megatron-Core MoE, DeepSeek-V3); equal to all parameters for dense models.
    params = sum(layer.params if layer.active_params is None else layer.active_params for layer in all_layers)
    return ModelSpec(name=name, family=family, layers=all_layers, tokens_per_sample=s,
                     model_flop_per_sample=palm_model_flop_per_sample(params, layers, h, s),
                     hidden=h, num_layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab,
                     source=tuple(source), moe=moe, head_dim=head_dim)


def build_vit(name: str, *, layers: int, hidden: int, heads: int, ffn_hidden: int | None = None,
              image_size: int = 224, patch: int = 16, channels: int = 3, num_classes: int = 1000,
              source: tuple[str, ...] = ()) -> ModelSpec:
    """A Vision Transformer (Dosovitskiy et al. 2021) as torchvision builds it: patch
    embedding conv, [CLS] token, learned positions, pre-norm GELU blocks with
    biases, final LayerNorm, linear classifier on [CLS].

    Tokens per image: (image_size/patch)^2 + 1 (197 at 224x224, patch 16). A
    vision model: tokens_per_sample is None and model FLOP are 3x forward.

    >>> build_vit("vit-b16", layers=12, hidden=768, heads=12).params   # torchvision vit_b_16
    86567656
    """
    grid = image_size // patch
    s, h = grid * grid + 1, hidden
    f = 4 * h if ffn_hidden is None else ffn_hidden
    k = channels * patch * patch
    patch_conv = OpSpec("patch_embedding", "conv", 2.0 * grid * grid * h * k,
                        float(channels * image_size ** 2 + k * h + grid * grid * h), (grid * grid, h, k))
    # Keeps the image (conv input, 2 bytes/element) and the embedding dropout mask (sh).
    emb = LayerSpec("embedding", "embedding", k * h + h + h + s * h,     # conv w+b, [CLS], positions
                    (patch_conv, elementwise_op("position_add", s * h, inputs=2)),
                    activation_bytes=float(2 * channels * image_size ** 2 + s * h))
    blocks = [transformer_block(f"block{i}", s=s, h=h, heads=heads, kv_heads=heads, f=f, causal=False)
              for i in range(layers)]
    head = LayerSpec("classifier", "classifier", h * num_classes + num_classes,
                     (gemm_op("classifier", 1, num_classes, h, bias=True), _loss_op(1, num_classes)),
                     activation_bytes=float(2 * h))
    all_layers = (emb, *blocks, final_norm(s, h, "layernorm"), head)
    forward = sum(layer.forward_flop for layer in all_layers)
    return ModelSpec(name=name, family="vit", layers=all_layers, tokens_per_sample=None,
                     model_flop_per_sample=3.0 * forward, hidden=h, num_layers=layers,
                     heads=heads, kv_heads=heads, vocab=None, source=tuple(source))
