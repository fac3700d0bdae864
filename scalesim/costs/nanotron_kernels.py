"""nanotron's Llama block and loss as its model code runs them: the memory-bound kernels beyond
scalesim's fused defaults.

Read from src/nanotron/models/llama.py and parallel/tensor_parallel/functional.py @67c5ebb6 (the
branch its benchmark sweep ran). Its RMSNorm (TritonRMSNorm) and rotary embedding (flash-attn's
in-place Triton kernel) are fused kernels, as scalesim's defaults; the rest runs as eager PyTorch.
Bytes per element read + written, 16-bit activations:

- SwiGLU (GLUActivation.forward: `torch.split` of the merged gate/up projection, then
  `self.act(gate_states) * up_states`): forward SiLU (2 + 2) and the product (2 + 2 + 2), 10 bytes
  per output element in 2 kernels where a fused kernel moves 6. Backward (autograd): MulBackward's
  two products (grad x up, grad x SiLU output: 2 + 2 + 2 each), SiluBackward (gradient and input
  read, 2 + 2 + 2) and SplitBackward's cat of the two halves' gradients into the merged projection's
  gradient (4 read, 4 written): 26 bytes, where a fused kernel's backward moves 12.
- Attention layout (CausalSelfAttention.forward, training path): the qkv projection's output is made
  contiguous as [3, batch, seq, heads, d] (q, k and v read and written once; with grouped-query
  attention three `.transpose(0, 1).contiguous()` copies, the same bytes), k and v are concatenated
  (`torch.cat`) and permuted contiguous again for flash-attn's rotary kernel (each reads and writes
  k and v): per token 2 (q + 2 kv) + 4 kv + 4 kv elements of 16 bits forward. Backward: SplitBackward
  stacks dk and dv (4 kv), UnbindBackward stacks dq, dk and dv (2 (q + 2 kv)), and the permuted
  gradient is made contiguous for the qkv GEMM's backward (2 (q + 2 kv)). Nothing of this is saved:
  the memory side is `saved_activations: nanotron` (scalesim/costs/memory.py).
- Loss (`sharded_cross_entropy(logits, ..., dtype=torch.float)`, an autograd Function): forward the
  cast to fp32 (2 + 4), torch.max over the vocabulary (4), the shift (4 + 4), exp in place (4 + 4),
  the sum (4) and the normalisation `div_` (4 + 4): 38 bytes per logit in 6 kernels, where the
  default loss op moves 4. Backward: the target's `-= 1` touches one logit a row; `grad_input.mul_`
  (4 + 4) and the cast's backward to 16 bits (4 + 2): 14 bytes, where the default moves 8.

Each piece keeps its op's name where tensor parallelism splits by name (parallel/sharding.py); the
attention layout and the loss's extra passes have names of their own there.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# (forward, backward) 16-bit elements read + written per SwiGLU output element, per kernel.
SWIGLU_KERNELS = ((2.0, 3.0), (3.0, 10.0))          # SiLU (its backward); product (MulBackward + cat)
# (forward, backward) per logit: cast, max, shift, exp, sum, normalise (16-bit element units: bytes / 2).
LOSS_KERNELS = ((3.0, 3.0), (2.0, 0.0), (4.0, 0.0), (4.0, 0.0), (2.0, 0.0), (4.0, 4.0))
LAYOUT_NAME = "attention_layout"
LOSS_PASS_NAME = "cross_entropy_pass"
PRECISIONS = ("fp16", "bf16", "fp8")


def layout_elements(attention: OpSpec) -> tuple[float, float]:
    """(forward, backward) 16-bit elements the attention layout copies move for one sample, from the
    attention op's q and kv widths (flop 4 s^2 q, moving 2 s q + 2 s kv elements).

    >>> from scalesim.models.transformer import transformer_block
    >>> b = transformer_block("b", s=8, h=16, heads=2, kv_heads=2, f=32, ffn="swiglu", rotary=True)
    >>> layout_elements(next(op for op in b.ops if op.kind == "attention")) == (14 * 8 * 16, 16 * 8 * 16)
    True
    """
    s = attention.seq
    q = attention.flop / (4.0 * s * s)
    kv = (attention.elements_moved - 2.0 * s * q) / (2.0 * s)
    return s * (2 * (q + 2 * kv) + 8 * kv), s * (4 * kv + 4 * (q + 2 * kv))


def _block_ops(op: OpSpec) -> list[OpSpec]:
    if op.kind == "elementwise" and op.name == "swiglu":
        n = op.elements_moved / 3                      # output elements (gate and up read, output written)
        flop = op.flop / len(SWIGLU_KERNELS)
        return [OpSpec(op.name, "elementwise", flop, n * f, backward_elements=n * b) for f, b in SWIGLU_KERNELS]
    if op.kind == "attention" and op.seq > 0:
        forward, backward = layout_elements(op)
        return [OpSpec(LAYOUT_NAME, "elementwise", 0.0, forward, backward_elements=backward), op]
    return [op]


def nanotron_model(model: ModelSpec, precision: str) -> ModelSpec:
    """`model` with its transformer blocks' SwiGLU and attention layout as nanotron runs them.

    >>> from scalesim.models import get_model
    >>> m = nanotron_model(get_model("llama3-8b", seq_len=1024), "bf16")
    >>> [op.name for op in m.layers[1].ops].count("swiglu"), LAYOUT_NAME in [op.name for op in m.layers[1].ops]
    (2, True)
    """
    if precision not in PRECISIONS:
        return model

    def block(layer: LayerSpec) -> LayerSpec:
        if layer.kind != "transformer_block":
            return layer
        return replace(layer, ops=tuple(piece for op in layer.ops for piece in _block_ops(op)))
    return replace(model, layers=tuple(block(layer) for layer in model.layers))


def nanotron_loss_model(model: ModelSpec) -> ModelSpec:
    """`model` with its loss as nanotron's fp32 sharded cross-entropy runs it: the loss op (kept, as
    the loss's memory counts its logits: costs/loss_memory.py) becomes the max over the vocabulary,
    the other kernels `cross_entropy_pass` ops beside it.

    >>> from scalesim.models import get_model
    >>> head = nanotron_loss_model(get_model("llama3-8b", seq_len=1024)).layers[-1]
    >>> [op.name for op in head.ops].count("cross_entropy"), [op.name for op in head.ops].count(LOSS_PASS_NAME)
    (1, 5)
    """
    def head(layer: LayerSpec) -> LayerSpec:
        ops = []
        for op in layer.ops:
            if op.name != "cross_entropy":
                ops.append(op)
                continue
            logits, flop = op.elements_moved / 2, op.flop / len(LOSS_KERNELS)
            for index, (forward, backward) in enumerate(LOSS_KERNELS):
                name = op.name if index == 1 else LOSS_PASS_NAME
                ops.append(OpSpec(name, op.kind, flop, logits * forward, backward_elements=logits * backward))
        return layer if len(ops) == len(layer.ops) else replace(layer, ops=tuple(ops))
    return replace(model, layers=tuple(head(layer) for layer in model.layers))

