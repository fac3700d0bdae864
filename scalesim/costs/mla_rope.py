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

All of it is in mla_up_proj's recompute (the function it checkpoints) and splits by heads under
tensor parallelism (named `rope`). What it keeps for backward is not added to the memory model.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# Element moves per head and token of the query's rotary part, per kernel, in units of r.
Q_ROPE_KERNELS = (2.0, 2.0, 1.0, 2.0, 2.0, 3.0, 2.0)
FREQ_KERNELS = 12            # cos, * mscale, cast and sin, * mscale, cast, for the query and the key


def backward_per_head_token(n: int, r: int, v: int) -> float:
    """Element moves of the unfused path's backward per head and token (module docstring).

    >>> backward_per_head_token(128, 64, 128)
    2176.0
    """
    return float(2 * (n + v) + r + 2 * (n + r) + (2 * 2 + 1 + 2 + 2 * 3 + 4 + 2) * r)


def unfused_ops(rope: OpSpec, s: int, heads: int, n: int, r: int, v: int) -> list[OpSpec]:
    """The eager kernels replacing MLA's fused `rope` op, for one sample of `s` tokens and `heads` heads.

    >>> ops = unfused_ops(OpSpec("rope", "elementwise", 0.0, 4.0 * 8 * 2 * 64), 8, 2, 128, 64, 128)
    >>> len(ops), {op.name for op in ops}, sum(op.elements_moved for op in ops) / (8 * 2)
    (29, {'rope'}, 3136.0)
    """
    head_tokens = float(s * heads)
    forward = ([k * r * head_tokens for k in Q_ROPE_KERNELS]                  # the query's rotary part
               + [k * r * s for k in Q_ROPE_KERNELS]                          # the key's, one for all heads
               + [2.0 * r * s] * FREQ_KERNELS                                 # YaRN cos / sin, small
               + [2.0 * (n + r) * head_tokens, 2.0 * (n + r) * head_tokens, 2.0 * v * head_tokens])
    backward = backward_per_head_token(n, r, v) * head_tokens
    total = sum(forward)
    flop = rope.flop / len(forward)
    return [OpSpec("rope", "elementwise", flop, moved, backward_elements=backward * moved / total)
            for moved in forward]


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
    >>> [op.name for op in m.layers[1].ops].count("rope")
    29
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
