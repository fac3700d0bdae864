"""Transformer Engine's UnfusedDotProductAttention: what it runs beyond the fused softmax path.

Transformer Engine falls back to its 'unfused' attention backend when neither FlashAttention nor
cuDNN takes the heads (e.g. DeepSeek-V3's 192/128 MLA heads on Blackwell before TE 2.5: the dgxc
DeepSeek-V3 GB200 validation scenarios). It materialises the scores as Megatron-LM's fused
attention does (`attention: fused`, compute.attention_time_s: QK^T, the fused scale-mask-softmax
kernel, AV), and its forward adds two things (NVIDIA/TransformerEngine @bee4649c, the TE of NeMo
2.3's manifest, transformer_engine/pytorch/attention.py UnfusedDotProductAttention.forward):

1. The causal mask, built anew on every call as a [1, 1, sq, sk] tensor (line 3851,
   dot_product_attention/utils.py get_full_mask lines 1091-1119): an int32 difference of two
   aranges (write 4 bytes per element), swa_left and swa_right (read 4, write 4 each), two
   comparisons to bool (read 4, write 1 each), two torch.where(cond, 1, 0) to int64 (read 1,
   write 8 each), their int64 difference (read 16, write 8) and logical_not (read 8, write 1):
   MASK_BYTES_PER_ELEMENT in MASK_KERNELS kernels (the two aranges included), once per call
   whatever the heads and the micro-batch. The fused softmax then reads it (tex.
   scaled_masked_softmax_forward via ScaledMaskedSoftmax; the causal-only kernel is commented
   out, softmax.py forward_fused_softmax): one 16 MB mask (s = 4096) shared by all heads, re-read a head
   later, left to the L2 cache (126 MB on B200: chipsandcheese.com, "Nvidia's B200: Keeping the CUDA
   Juggernaut Rolling").
2. The context copied from [b, np, sq, hn] to [sq, b, np, hn] (line 3984,
   permute(2, 0, 1, 3).contiguous()): a read and a write of the output.

Neither runs in backward (the mask takes no gradient; a permute's gradient is a view). Backward,
the scores' GEMM is torch.baddbmm(..., beta=0.0, alpha=softmax_scale) (line 3903), whose gradients
autograd scales by alpha in kernels of their own (PyTorch tools/autograd/derivatives.yaml, baddbmm:
batch1 and batch2 `maybe_multiply(..., alpha)`, a multiply unless alpha is 1): a read and a write of
the query's and the key's gradient, BACKWARD_SCALE_PASSES elements of the query's size. Selective
recomputation of the attention core (Megatron's core_attn) re-runs the forward, mask included.
"""

from __future__ import annotations

from scalesim.models.spec import OpSpec

MASK_BYTES_PER_ELEMENT = 4.0 + 2 * 8.0 + 2 * 5.0 + 2 * 9.0 + 24.0 + 9.0     # 81 bytes per sq x sk element
MASK_KERNELS = 11
OUTPUT_COPY_PASSES = 2.0          # read and write of the attention output, elements of its size
EXTRA_FORWARD_KERNELS = MASK_KERNELS + 1
BACKWARD_SCALE_PASSES = 4.0       # dQ and dK (as wide as the query), each read and written
EXTRA_BACKWARD_KERNELS = 2


def mask_bytes(seq: int) -> float:
    """Bytes the per-call causal mask build moves for a sequence of `seq` query and key tokens.

    >>> mask_bytes(4096) / 1e9
    1.358954496
    """
    return MASK_BYTES_PER_ELEMENT * float(seq) * float(seq)


def builds_mask(op: OpSpec) -> bool:
    """Whether the op's forward builds the causal mask: causal attention only (TE's no_mask / padding
    types: get_full_mask is causal-only here). The one place this rule lives: the bytes (`extra_bytes`)
    and the launches (`extra_kernels`, which costs/host.py layer_kernels counts) both ask it."""
    return op.causal


def extra_kernels(op: OpSpec, backward: bool) -> int:
    """Kernels Transformer Engine's unfused attention adds to the `fused` path for an attention op: the
    backward's gradient scaling; the forward's output copy and, if it builds one, its mask."""
    if backward:
        return EXTRA_BACKWARD_KERNELS
    return EXTRA_FORWARD_KERNELS - (0 if builds_mask(op) else MASK_KERNELS)


def extra_bytes(op: OpSpec, batch: int, element_bytes: float, backward: bool) -> tuple[float, int]:
    """(bytes moved, kernels) that Transformer Engine's unfused attention adds to the `fused` path for an
    attention op (its seq, score_elements and head_dims) and micro-batch of `batch` samples."""
    if not op.seq:
        return 0.0, 0
    qk, v = op.head_dims if op.head_dims else (op.flop / (4 * op.score_elements),) * 2
    per_head_token = op.score_elements / op.seq * batch * element_bytes      # heads x s tokens, in bytes
    if backward:
        return BACKWARD_SCALE_PASSES * qk * per_head_token, extra_kernels(op, backward)
    mask = mask_bytes(op.seq) if builds_mask(op) else 0.0
    return mask + OUTPUT_COPY_PASSES * v * per_head_token, extra_kernels(op, backward)
