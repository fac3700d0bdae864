"""Element-wise ops as eager PyTorch reference code runs them: one kernel per Python op.

scalesim's transformer ops are fused kernels by default: an RMSNorm reads its
input and writes its output once, rotary embedding and SwiGLU one pass each
(Megatron-LM / Transformer Engine, and what torch.compile's Inductor generates
from pointwise chains). Model code run eagerly instead launches every tensor
operation as its own kernel, with fp32 intermediates written to and read back
from memory. The sequences below are read from torchtitan's Llama code
(Dec 2024, `norm_type = "rmsnorm"` in llama3_8b.toml), which Hugging Face's
Llama follows op for op:

- RMSNorm (torchtitan `models/norms.py` RMSNorm.forward):
  `x.float()` (read 2, write 4 bytes per element), `.pow(2)` (4 + 4),
  `.mean(-1)` (4), `+ eps` and `rsqrt` (one value per row), `x * rsqrt` (4 + 4),
  `.type_as(x)` (4 + 2), `* weight` (2 + 2): 36 bytes per element in 8 kernels,
  where a fused kernel moves 4.
- rotary embedding (`apply_rotary_emb`, for q and for k): `.float()` (2 + 4),
  complex multiply by `freqs_cis` (4 + 4), `.type_as` (4 + 2): 20 bytes per
  element in 3 kernels per tensor, where a fused kernel moves 4.
- SwiGLU (`w2(F.silu(w1(x)) * w3(x))`): `silu` (2 + 2), the product (4 + 2):
  10 bytes per output element in 2 kernels, where a fused kernel moves 6.

Hugging Face's LlamaRMSNorm runs the same RMSNorm sequence; its RoPE
(`q * cos + rotate_half(q) * sin`: negate, concatenate, two products, a sum)
moves about the same 20 bytes per element in five kernels, counted here as
torchtitan's three.

Backward runs each piece's own backward kernel (autograd), priced as every
element-wise op is (scalesim/costs/compute.py). Applies to 16-bit and fp8
training; in fp32 the casts do not exist and the model is left as it is.

Under torch.compile the same code is fused, except its rotary embedding: torchtitan (9dec370 and
after, `apply_rotary_emb` in models/llama/model.py, as Meta's Llama reference) multiplies by
`freqs_cis` in complex64 (`view_as_complex(xq.float()...) * freqs_cis`, then `view_as_real`,
`type_as`), and Inductor has no code generation for complex tensors: an op that reads or writes
one falls back to its eager ATen kernel (torch/_inductor/lowering.py, `unsupported_input_tensor`,
with the warning "Torchinductor does not support code generation for complex operators.
Performance may be worse than eager"; pytorch/torchtitan issue #15 reports it for this RoPE).
The casts on either side border the q/k projection GEMM and the fallback, so they stay kernels of
their own (the cast back of k may share its pass with repeat_kv's copy, counted in neither mode):
the three kernels per tensor stay (`eager_rope_model`), while RMSNorm and SwiGLU fuse. Projects
that moved RoPE to real arithmetic for this reason report compile speed-ups from it (e.g.
huggingface/diffusers pull request #11649).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.nanotron_kernels import nanotron_loss_model, nanotron_model
from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec
from scalesim.models.transformer import RMSNORM_FLOP_PER_ELEMENT

# Bytes per element each eager kernel moves, in launch order (see the module docstring).
RMSNORM_KERNEL_BYTES = (6.0, 8.0, 4.0, 0.0, 0.0, 8.0, 6.0, 4.0)
ROPE_KERNEL_BYTES = (6.0, 8.0, 6.0)          # per tensor, q then k
SWIGLU_KERNEL_BYTES = (4.0, 6.0)
EAGER_PRECISIONS = ("fp16", "bf16", "fp8")


def _pieces(op: OpSpec, elements: float, kernel_bytes: tuple[float, ...], element_bytes: float) -> list[OpSpec]:
    """`op` as one element-wise kernel per entry of kernel_bytes, keeping its name (tensor-parallel
    splits and the attention / MLP halves go by name) and sharing its FLOP among them."""
    flop = op.flop / len(kernel_bytes)
    return [OpSpec(op.name, "elementwise", flop, elements * b / element_bytes) for b in kernel_bytes]


def _is_rmsnorm(op: OpSpec) -> bool:
    """A norm over n elements built by `norm_op`: flop = 4 n for RMSNorm, elements moved 2 n + weights."""
    n = op.flop / RMSNORM_FLOP_PER_ELEMENT
    return op.kind == "norm" and 2 * n <= op.elements_moved < 2.01 * n + 1e6


def eager_ops(op: OpSpec, element_bytes: float = 2.0) -> list[OpSpec]:
    """The kernels eager PyTorch runs for one fused op (the op itself when it has no eager sequence).

    >>> from scalesim.models.transformer import elementwise_op
    >>> [p.elements_moved for p in eager_ops(elementwise_op("swiglu", 100, inputs=2, flop_per_element=5))]
    [200.0, 300.0]
    """
    if _is_rmsnorm(op):
        return _pieces(op, op.flop / RMSNORM_FLOP_PER_ELEMENT, RMSNORM_KERNEL_BYTES, element_bytes)
    if op.kind == "elementwise" and op.name == "rope":
        half = op.elements_moved / 2 / 2          # q and k elements, half each (their split is not kept)
        return _pieces(op, half, ROPE_KERNEL_BYTES * 2, element_bytes)
    if op.kind == "elementwise" and op.name in ("swiglu", "shared_swiglu"):
        return _pieces(op, op.elements_moved / 3, SWIGLU_KERNEL_BYTES, element_bytes)
    return [op]


def eager_layer(layer: LayerSpec, element_bytes: float = 2.0) -> LayerSpec:
    ops = tuple(piece for op in layer.ops for piece in eager_ops(op, element_bytes))
    return layer if len(ops) == len(layer.ops) else replace(layer, ops=ops)


def eager_model(model: ModelSpec, precision: str) -> ModelSpec:
    """`model` with its RMSNorms, rotary embeddings and SwiGLUs run as eager PyTorch kernels."""
    if precision not in EAGER_PRECISIONS:
        return model
    return replace(model, layers=tuple(eager_layer(layer) for layer in model.layers))


def eager_rope_model(model: ModelSpec, precision: str) -> ModelSpec:
    """`model` as torch.compile runs torchtitan's Llama: fused, but its complex-number rotary
    embeddings run as the eager kernels (see the module docstring).

    >>> from scalesim.models import get_model
    >>> m = eager_rope_model(get_model("llama3-8b", seq_len=1024), "bf16")
    >>> [op.name for op in m.layers[1].ops].count("rope"), [op.name for op in m.layers[1].ops].count("swiglu")
    (6, 1)
    """
    if precision not in EAGER_PRECISIONS:
        return model

    def rope_only(layer: LayerSpec) -> LayerSpec:
        ops = tuple(piece for op in layer.ops
                    for piece in (eager_ops(op) if op.kind == "elementwise" and op.name == "rope" else [op]))
        return layer if len(ops) == len(layer.ops) else replace(layer, ops=ops)
    return replace(model, layers=tuple(rope_only(layer) for layer in model.layers))


def gemm_gelu_model(model: ModelSpec) -> ModelSpec:
    """`model` with each MLP's GELU done inside its GEMMs: forward, the up-projection's epilogue
    applies bias and GELU and keeps the pre-activation for backward (cuBLASLt
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS); backward, the down-projection's data-gradient GEMM applies the
    GELU derivative in its epilogue (CUBLASLT_EPILOGUE_DGELU_BGRAD). NVIDIA's MLPerf BERT passes
    --fused_gemm_gelu (config_*.sh of mlcommons/training_results_v4.0-v5.0, BERT), which runs the MLP
    as apex's FusedDenseGeluDense (apex/fused_dense, linear_gelu_linear on those epilogues). The
    separate GELU pass and its backward disappear; the GEMMs stay compute-bound, so their time is kept.
    What is saved for backward is unchanged (the pre-activation, as before).

    >>> from scalesim.models import get_model
    >>> bert = get_model("bert-large", seq_len=128)
    >>> [op.name for op in gemm_gelu_model(bert).layers[1].ops if "gelu" in op.name]
    []
    """
    def without(layer: LayerSpec) -> LayerSpec:
        ops = tuple(op for op in layer.ops if op.name != "gelu")
        return layer if len(ops) == len(layer.ops) else replace(layer, ops=ops)
    return replace(model, layers=tuple(without(layer) for layer in model.layers))


def with_nanotron_kernels(model: ModelSpec, elementwise_kernels: str, cross_entropy: str,
                          precision: str) -> ModelSpec:
    """`model` with nanotron's block kernels (`elementwise_kernels: nanotron`) and its loss's fp32
    passes (`cross_entropy: fp32-upcast`, nanotron's sharded cross-entropy), each when named."""
    if elementwise_kernels == "nanotron":
        model = nanotron_model(model, precision)
    return nanotron_loss_model(model) if cross_entropy == "fp32-upcast" else model
