"""Multi-head latent attention's rotary embedding without Megatron-Core's RoPE fusion.

scalesim's MLA block (models/moe.py mla_ops) has one fused `rope` op, as Megatron-Core runs MLA
with `apply_rope_fusion` (its fused MLA RoPE kernels write the query in place and the key and
value in one pass: NeMo's DeepSeek-V3 performance script sets it from NeMo 25.09 on,
scripts/performance/llm/pretrain_deepseek_v3.py:95 @9244b1ec; Megatron Bridge's performance
overrides for every model, scripts/performance/utils/overrides.py:54 @00b7660b). Before that,
MLA's YaRN RoPE could not be fused (Megatron-LM @3cdfd613, the Megatron-Core of the nemo:25.04.01
container: multi_latent_attention.py:93 asserts `not apply_rope_fusion` for YaRN; NeMo's
DeepSeekConfig leaves apply_rope_fusion False, nemo/collections/llm/gpt/model/deepseek.py:114
@7a8f1cc7) and `qkv_up_proj_and_rope_apply` (multi_latent_attention.py:426-500) runs, per block
and micro-batch, as eager PyTorch kernels (`training.rope_fusion: false`):

- the rotary part of the query, [s, b, heads, r] (r = qk_rope_head_dim), through
  rope_utils._apply_rotary_pos_emb_bshd with multi_latent_attention (@3cdfd613): de-interleave
  (t[..., 0::2], t[..., 1::2], cat: read r, write r per head and token), t * cos (2r), _rotate_half's
  negation (r) and cat (2r), * sin (2r), the sum (3r) and the final cat with the empty pass-through
  part (2r): 14r element moves in 7 kernels; the same 7 kernels on the key's rotary part, [s, b, 1, r]
  (one for all heads), and cos / sin of the YaRN frequencies times mscale, cast (6 small kernels
  for each of the two calls);
- torch.cat of the query's two parts (read and write n + r, n = qk_nope_head_dim), of the key's
  (its rotary part expanded over the heads: n + r), and value.contiguous() out of the kv
  up-projection's output (read and write v = v_head_dim);
- backward (autograd): the cats' and splits' gradients joined again (the kv split: 2(n + v); the q
  split: 2(n + r)), the key's rotary gradient summed over the heads (r), and the query's rotary
  chain's backward (products 2 x 2r, negation r, chunk's cat 2r, two gradient sums 2 x 3r, the
  strided slices' zero-filled gradients 4r and 2r): BACKWARD_PER_HEAD_TOKEN element moves.

All of it is in mla_up_proj's recompute (the function it checkpoints). Under tensor parallelism the
per-head kernels split by heads (named `rope`), but the rotary key's and the frequencies' do not (named
`rope_key`): k_pos_emb comes out of the key-value down-projection, which every TP rank runs whole, as
[s, b, 1, r], one rotary key for all heads, gathered over the sequence under sequence parallelism, and
each rank rotates all of it (Megatron-LM @d98e8a64, multi_latent_attention.py get_query_key_value_tensors:
"k_pos_emb: [s, b, qk_pos_emb_head_dim]" after gather_from_sequence_parallel_region, then
apply_rotary_pos_emb on "k_pos_emb:[num_tokens, 1, qk_pos_emb_head_dim]" before its expand over
num_attention_heads_per_partition); parallel/sharding.py TP_WHOLE. Its backward is the query chain's
per token instead of per head and token (KEY_BACKWARD_PER_R); the frequencies take no gradient. What it
keeps for backward is not added to the memory model.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# Element moves per head and token of the query's rotary part, per kernel, in units of r.
Q_ROPE_KERNELS = (2.0, 2.0, 1.0, 2.0, 2.0, 3.0, 2.0)
FREQ_KERNELS = 12            # cos, * mscale, cast and sin, * mscale, cast, for the query and the key
# The rotary chain's backward per rotated row, in units of r: products 2 x 2r, negation r, chunk's cat 2r,
# two gradient sums 2 x 3r, the strided slices' zero-filled gradients 4r and 2r (module docstring).
KEY_BACKWARD_PER_R = 2 * 2 + 1 + 2 + 2 * 3 + 4 + 2
SHARED = "rope_key"          # the kernels of the one rotary key and its frequencies: whole on every TP rank


def backward_per_head_token(n: int, r: int, v: int) -> float:
    """Element moves of the unfused path's backward per head and token (module docstring).

    >>> backward_per_head_token(128, 64, 128)
    2176.0
    """
    return float(2 * (n + v) + r + 2 * (n + r) + KEY_BACKWARD_PER_R * r)


def unfused_ops(rope: OpSpec, s: int, heads: int, n: int, r: int, v: int) -> list[OpSpec]:
    """The eager kernels replacing MLA's fused `rope` op, for one sample of `s` tokens and `heads` heads:
    the per-head ones named `rope`, the rotary key's and the frequencies' `rope_key` (module docstring),
    each with its share of the op's FLOP by the elements it moves.

    >>> ops = unfused_ops(OpSpec("rope", "elementwise", 0.0, 4.0 * 8 * 2 * 64), 8, 2, 128, 64, 128)
    >>> len(ops), sorted({op.name for op in ops}), sum(op.elements_moved for op in ops) / (8 * 2)
    (29, ['rope', 'rope_key'], 3136.0)
    >>> [op.name for op in ops].count("rope_key"), sum(op.elements_moved for op in ops if op.name == "rope_key") / 8
    (19, 2432.0)
    """
    head_tokens = float(s * heads)
    query = [k * r * head_tokens for k in Q_ROPE_KERNELS]                     # the query's rotary part
    key = [k * r * s for k in Q_ROPE_KERNELS]                                 # the key's, one for all heads
    freqs = [2.0 * r * s] * FREQ_KERNELS                                      # YaRN cos / sin, small
    cats = [2.0 * (n + r) * head_tokens, 2.0 * (n + r) * head_tokens, 2.0 * v * head_tokens]
    total, per_head = sum(query + key + freqs + cats), sum(query + cats)
    backward = backward_per_head_token(n, r, v) * head_tokens
    pieces = ([("rope", moved, backward * moved / per_head) for moved in query]
              + [(SHARED, moved, KEY_BACKWARD_PER_R * r * s * moved / sum(key)) for moved in key]
              + [(SHARED, moved, 0.0) for moved in freqs]
              + [("rope", moved, backward * moved / per_head) for moved in cats])
    return [OpSpec(name, "elementwise", rope.flop * moved / total, moved, backward_elements=back)
            for name, moved, back in pieces]


def _mla_shape(layer: LayerSpec) -> tuple[int, int, int, int, int] | None:
    """(s, heads, n, r, v) of an MLA block, from its attention and fused rope ops; None elsewhere."""
    names = {op.name for op in layer.ops}
    if "mla_q_up" not in names or "rope" not in names:
        return None
    attention = next(op for op in layer.ops if op.kind == "attention")
    rope = next(op for op in layer.ops if op.name == "rope")
    s = attention.seq
    heads = round(attention.score_elements / (s * s))
    r = round(rope.elements_moved / (4 * s * heads))         # mla_ops: 2 x (s x heads x r x 2) elements
    qk, v = attention.head_dims
    return s, heads, qk - r, r, v


def unfused_mla_rope_model(model: ModelSpec) -> ModelSpec | None:
    """`model` with each MLA block's RoPE as Megatron-Core runs it without RoPE fusion (module
    docstring); None when the model has no multi-head latent attention.

    >>> from scalesim.models import get_model
    >>> m = unfused_mla_rope_model(get_model("deepseek-v3", seq_len=1024))
    >>> names = [op.name for op in m.layers[1].ops]
    >>> names.count("rope"), names.count("rope_key")
    (10, 19)
    >>> unfused_mla_rope_model(get_model("llama3-8b", seq_len=1024)) is None
    True
    """
    layers, changed = [], False
    for layer in model.layers:
        shape = _mla_shape(layer)
        if shape is None:
            layers.append(layer)
            continue
        ops = tuple(piece for op in layer.ops
                    for piece in (unfused_ops(op, *shape) if op.name == "rope" else [op]))
        layers.append(replace(layer, ops=ops))
        changed = True
    return replace(model, layers=tuple(layers)) if changed else None
