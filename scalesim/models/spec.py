"""What a model is, as the cost models see it: layers of operations with shapes.

A model is built for one sequence length (transformers) or image size (vision),
and describes ONE SAMPLE's forward pass. The cost models in `scalesim.costs`
turn it into time and memory for a micro-batch on a GPU; parallel plans split
it. Counts are in elements and FLOP, never bytes, because bytes depend on the
training precision that the cost model knows and the model does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

# Eager kernels attention code can run on its materialised scores (OpSpec.score_ops):
# "/ sqrt(d)" or "* scale" (scale), "+ mask" (mask_add), torch.max(scores, finfo.min)
# (clamp, Hugging Face OPT), softmax, and dropout (p > 0; PyTorch runs none at p = 0).
SCORE_OPS = ("scale", "mask_add", "clamp", "softmax", "dropout", "tanh")
# Bytes a score element keeps for backward, per kernel, in 16-bit (PyTorch autograd's saved tensors,
# tools/autograd/derivatives.yaml): scale (a multiply or divide by a number) and mask_add save nothing,
# and QK^T saves q and k, not its output; clamp, torch.maximum(scores, min), saves both inputs (the
# scores, 2); softmax its output (2); dropout its 1-byte mask and its output (2), which the AV matmul
# keeps. At p = 0 PyTorch runs no dropout (aten _dropout_impl returns its input) and the AV matmul keeps
# the softmax output, already counted; tanh (Gemma 2's logit soft-capping) keeps its output (2,
# derivatives.yaml "tanh: tanh_backward(grad, result)"). The default list keeps 5: Korthikanti et al. 2022's 5*a*s^2.
SCORE_OP_SAVED_BYTES = {"scale": 0.0, "mask_add": 0.0, "clamp": 2.0, "softmax": 2.0, "dropout": 3.0, "tanh": 2.0}
DEFAULT_SCORE_SAVED_BYTES = 5.0

@dataclass(frozen=True, slots=True)
class OpSpec:
    """One forward operation for one sample.

    flop: forward FLOP (a multiply-add counts 2).
    elements_moved: elements read + written from memory by the op (inputs,
      outputs and weights), which sets its memory-bound time.
    gemm_mnk: (m, n, k) of the GEMM for one sample (m = tokens of the sample,
      or output pixels for a conv lowered to GEMM); None for non-GEMM ops. The
      cost model scales m by the micro-batch and derives shape efficiency.
    score_elements: for attention, the attention-score matrices of one sample
      (heads x s x s), which naive attention writes and reads several times
      and flash attention never materialises.
    causal: for attention, whether the mask is causal (flash attention then
      skips the masked half of the work; FLOP still count the full s^2, as MFU does).
    score_ops: for attention, the eager kernels run on the materialised scores between
      the two batched matmuls, in order (names in SCORE_OPS; costs/score_ops.py prices
      them); None: the naive default, scale, mask_add, softmax, dropout (HF BERT/GPT-2).
    backward_only: a kernel that runs in the backward pass alone (its forward was fused into
      another op, its backward was not); elements_moved is then what that backward kernel moves.
    """

    name: str
    kind: str               # gemm, attention, conv, elementwise, norm, softmax, embedding or pool
    flop: float
    elements_moved: float
    gemm_mnk: tuple[int, int, int] | None = None
    score_elements: float = 0.0
    causal: bool = False
    groups: int = 1     # grouped GEMM (MoE experts): `groups` GEMMs of gemm_mnk each; flop is their sum
    head_dims: tuple[int, int] | None = None    # attention: (query/key, value) head dims when not standard (MLA)
    seq: int = 0        # attention: tokens of the sequence (query and key length); 0 when not known
    fp8: bool = False   # attention: the forward runs FP8 (Transformer Engine's FP8 dot-product attention)
    ring_steps: int = 1  # attention: context parallelism's ring steps, one kernel each (costs/context_chunks.py)
    window: int = 0      # attention: a sliding window of this many earlier keys a query sees; 0 = none (costs/flash.py)
    cp_gather: bool = False  # attention: CP all-gathers K and V before its kernels (TE cp_comm_type all_gather)
    cp_a2a: bool = False  # attention: CP all-to-alls Q, K, V to heads/cp, one whole-sequence kernel (TE's a2a)
    # FP8 GEMMs: share of its input (m x k) the GEMM casts to FP8 itself; less than 1 when the cast
    # is done once on a sequence-parallel shard before an FP8 all-gather (parallel/sharding.py)
    cast_share: float = 1.0
    # FP8 GEMMs: share of its output gradient (m x n) it casts in backward; 1/tp for a row-parallel GEMM
    # whose gradient is cast on its sequence-parallel shard and all-gathered in FP8 (costs/fp8_grad_casts.py)
    grad_cast_share: float = 1.0
    # FP8 GEMMs: MXFP8 (block scales): the cast writes the columnwise copy itself on any GPU, and it is all-gathered
    # with the rowwise one (costs/fp8_grad_casts.py)
    fp8_both_layouts: bool = False
    # FP8 GEMMs, TE current scaling: its input's / its output gradient's amax is computed in a pass of its own before
    # the cast, reading the 16-bit tensor once more (costs/fp8_current_scaling.py)
    fp8_amax_input: bool = False
    fp8_amax_grad: bool = False
    # GEMMs: left in 16 bits by an FP8 recipe (Megatron-Core's output layer, torchtitan's "output"): its GEMMs run at the
    # 16-bit rate (compute.py op_time_s; models/transformer.py lm_head)
    fp8_excluded: bool = False
    # FP8 GEMMs, TE delayed scaling: the norm before it writes its FP8 input (LayerNormLinear), no cast kernel of its
    # own (costs/fp8_norm_fusion.py)
    fp8_norm_input: bool = False
    score_ops: tuple[str, ...] | None = None
    backward_only: bool = False
    # Memory-bound ops: elements its backward kernels read + write, when they are not the forward's
    # times BACKWARD_BYTES_RATIO (an autograd Function with its own backward: costs/nanotron_kernels.py)
    backward_elements: float | None = None
    # Whether a per-op checkpoint policy that saves this op's output keeps it: False where backward never
    # reads it and torch.compile's partitioner drops it (costs/recompute.py, compiled_saves)
    saved_output: bool = True
    # GEMMs: the column widths of separate GEMMs this op runs as, each reading its whole input
    # (torchtitan's wq, wk, wv: costs/projections.py); () = one GEMM
    parts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """A unit the frameworks treat as one module (a transformer block, embedding, head, conv stage).

    params: parameter count of the layer.
    ops: forward ops, one sample.
    activation_bytes: bytes stored for backward per sample in 16-bit mixed
      precision without recomputation, EXCLUDING attention score matrices
      (Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 1:
      s*h*34 per transformer block at b=1, t=1).
    attention_score_bytes: the attention-score part of the same equation,
      5*a*s^2 per block at b=1 (softmax input/output and dropout mask), which
      flash attention does not store; 0 for layers without attention.
    """

    name: str
    kind: str          # embedding | transformer_block | head | conv_block | stem | classifier | norm
    params: int
    ops: tuple[OpSpec, ...]
    activation_bytes: float
    attention_score_bytes: float = 0.0
    expert_params: int = 0          # of `params`, the routed experts' (split by expert parallelism)
    active_params: int | None = None    # parameters one token uses (MoE: top_k of the experts); None = all

    @property
    def forward_flop(self) -> float:
        return sum(op.flop for op in self.ops)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A whole model built for one input size.

    tokens_per_sample: sequence length for token models, None for vision models.
    model_flop_per_sample: FLOPs for forward+backward of one sample as MFU
      counts them (6*N + 12*layers*hidden*seq per token, PaLM App. B, for
      transformers; 3x forward FLOPs for CNNs), never recomputation.
    """

    name: str
    family: str                    # gpt2 | gpt3 | llama2 | llama3 | bert | vit | resnet | inline
    layers: tuple[LayerSpec, ...]
    tokens_per_sample: int | None
    model_flop_per_sample: float
    hidden: int | None = None
    num_layers: int | None = None  # transformer blocks (or residual blocks)
    heads: int | None = None
    kv_heads: int | None = None
    vocab: int | None = None
    source: tuple[str, ...] = ()
    moe: "MoESpec | None" = None
    head_dim: int | None = None    # where heads x head_dim is not hidden (Gemma 2, Qwen3); None: hidden / heads

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters one token goes through (all of them for dense models)."""
        return sum(layer.params if layer.active_params is None else layer.active_params for layer in self.layers)


@dataclass(frozen=True, slots=True)
class MoESpec:
    """A mixture-of-experts MLP (Shazeer et al. 2017; Fedus et al. 2022, Switch Transformer).

    experts: routed experts per MoE layer; top_k: experts each token goes to;
    expert_ffn_hidden: each expert's MLP width; shared_experts: experts every
    token goes through (DeepSeekMoE, Dai et al. 2024), of `shared_ffn_hidden`
    [expert_ffn_hidden] width; every: an MoE layer every N blocks (the others
    dense); first_dense: leading dense blocks (DeepSeek-V3: 3); capacity_factor:
    tokens an expert takes at most, over the mean (None: no cap, no drops);
    groups, group_topk: group-limited routing, the experts cut into `groups`
    consecutive groups of which a token uses at most `group_topk` (DeepSeek-V3:
    8 and 4; 0 = no limit).
    """

    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int = 0
    every: int = 1
    capacity_factor: float | None = None
    router: str = "topk"
    first_dense: int = 0
    shared_ffn_hidden: int | None = None
    groups: int = 1
    group_topk: int = 0

    def is_moe_layer(self, index: int) -> bool:
        """Whether block `index` (from 0) has the MoE MLP."""
        return index >= self.first_dense and (index - self.first_dense) % self.every == self.every - 1


def with_each_op(model: ModelSpec, change: Callable[[OpSpec], OpSpec]) -> ModelSpec:
    """`model` with `change` applied to every op of every layer (the layers' other fields as they were)."""
    return replace(model, layers=tuple(replace(layer, ops=tuple(change(op) for op in layer.ops))
                                       for layer in model.layers))
