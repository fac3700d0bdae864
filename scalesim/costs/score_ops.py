"""Passes over the materialised attention scores, per eager kernel (naive attention) and of fused attention.

Eager attention code writes the b x heads x s x s scores with its QK^T matmul, runs
a few element-wise kernels over them, and reads them back in the AV matmul. Which
kernels run depends on the model family's code (OpSpec.score_ops, names in
scalesim.models.spec.SCORE_OPS). Passes are in 16-bit units, each a full read or
write of the scores; a 1-byte boolean tensor counts 0.5. Per kernel, (forward passes,
backward passes, forward kernels, backward kernels):

- scale, "/ sqrt(d)" (HF BERT, GPT-2): reads and writes (2); its backward the same.
- mask_add, "+ mask": reads and writes (2, the mask broadcast from s x s); the
  gradient passes through unchanged, no backward kernel (PyTorch AddBackward).
- clamp, torch.max(scores, finfo.min) (HF OPT): maximum's forward reads and writes (2);
  its backward is PyTorch's formula for maximum (tools/autograd/derivatives.yaml,
  "maximum": at::where(self == other, grad / 2, grad).masked_fill_(self < other, 0)),
  five kernels: grad / 2 (2), self == other (1 + 0.5), where (0.5 + 2 + 1),
  self < other (1 + 0.5), masked_fill_ (0.5 + 2): 11.
- softmax (2); backward reads output and gradient and writes (3).
- dropout: reads, writes and stores its 1-byte mask (2.5); backward the same.
- tanh (Gemma 2's soft-capping, `scores / cap`, `tanh`, `* cap`: two scales around it) reads and
  writes (2); its backward, tanh_backward(grad, result), reads both and writes (3).

The matmuls around them: forward, QK^T writes the scores and AV reads the
probabilities (2); backward, dP written, P read for dV, dS read for dQ and for dK (4),
in 2 and 4 kernels.

The default list (HF BERT and GPT-2 eager attention, NVIDIA DLE BERT) gives
SCORE_PASSES' naive (10.5, 11.5) in (6, 7) kernels.

Check (NeuSight's per-op labels, H100 fp32, OPT-1.3B s2048 b1, one layer, sitar-lab/NeuSight
scripts/asplos/label/NVIDIA_H100_80GB_HBM3/opt_13-train-2048-1.csv): the clamp is real and its
backward is the dearest score kernel (max forward 0.44 ms, backward 1.96 ms, softmax 0.42 /
1.12 ms). With this list the attention core is predicted 2.97 ms forward (measured 2.40; 3.67
with the default list) and 6.5 ms backward (measured 4.85; 4.67 with the default list): fp32
element-wise kernels there run near DRAM speed (2.4-2.7 TB/s), faster than
compute.STREAM_BYTES_PER_SM_CYCLE's 16-bit fit allows (1.92 TB/s).
"""

from __future__ import annotations

from scalesim.models.spec import SCORE_OPS

SCORE_OP_COSTS = {
    "scale": (2.0, 2.0, 1, 1),
    "mask_add": (2.0, 0.0, 1, 0),
    "clamp": (2.0, 11.0, 1, 5),
    "softmax": (2.0, 3.0, 1, 1),
    "dropout": (2.5, 2.5, 1, 1),
    "tanh": (2.0, 3.0, 1, 1),
}
assert tuple(SCORE_OP_COSTS) == SCORE_OPS
MATMUL_SCORE_PASSES = (2.0, 4.0)
MATMUL_KERNELS = (2, 4)
DEFAULT_SCORE_OPS = ("scale", "mask_add", "softmax", "dropout")

# Attention that materialises the b x heads x s x s scores moves them through
# memory several times; passes per implementation, (forward, backward), in
# 16-bit units (a 1-byte dropout mask counts 0.5):
# - naive: eager PyTorch as in NVIDIA DLE BERT modeling.py and HF BERT/GPT-2:
#   matmul writes the scores (1); "/ sqrt(d)" (2) and "+ mask" (2) read and
#   write them; softmax (2); dropout reads, writes and stores its mask (2.5);
#   the AV matmul reads the probabilities (1): 10.5. Backward: dP written (1),
#   P read for dV (1), dropout backward (2.5), softmax backward reads output
#   and gradient and writes (3), the scale (2), dS read for dQ and dK (2): 11.5.
# - fused: Megatron-LM's fused scale + mask + softmax kernels (Narayanan et al.
#   2021, SC21, sec. 4.2): matmul write (1), fused softmax (2), dropout (2.5), AV
#   read (1): 6.5; backward 1 + 1 + 2.5 + 3 + 2 = 9.5. Transformer Engine's UnfusedDotProductAttention
#   runs the same (TE bee4649c transformer_engine/pytorch/attention.py:3903-3977: baddbmm with the
#   scale as alpha, FusedScaleMaskSoftmax, nn.Dropout, bmm). At attention dropout 0 (an op whose
#   score_ops leave out dropout) PyTorch runs no dropout kernel: 4.0 and 7.0 (`fused_score_passes`).
SCORE_PASSES = {"naive": (10.5, 11.5), "fused": (6.5, 9.5)}
FUSED_SCORE_OPS = ("softmax", "dropout")     # the fused scale+mask+softmax kernel, then dropout


def score_passes(score_ops: tuple[str, ...] | None, backward: bool = False) -> tuple[float, int]:
    """(passes over the scores, kernels) of naive attention's forward (or backward).

    >>> score_passes(None), score_passes(None, backward=True)
    ((10.5, 6), (11.5, 7))
    >>> score_passes(("mask_add", "clamp", "softmax"))      # Hugging Face OPT, attention_dropout 0.0
    (8.0, 5)
    """
    i = 1 if backward else 0
    ops = DEFAULT_SCORE_OPS if score_ops is None else score_ops
    passes = MATMUL_SCORE_PASSES[i] + sum(SCORE_OP_COSTS[name][i] for name in ops)
    kernels = MATMUL_KERNELS[i] + sum(SCORE_OP_COSTS[name][2 + i] for name in ops)
    return passes, kernels


def fused_score_passes(score_ops: tuple[str, ...] | None, backward: bool = False) -> tuple[float, int]:
    """(passes over the scores, kernels) of fused attention (SCORE_PASSES): the dropout kernel only
    where the model's attention code runs one (`score_ops` None, the default list, has it).

    >>> fused_score_passes(None), fused_score_passes(("scale", "mask_add", "softmax"), backward=True)
    ((6.5, 4), (7.0, 5))
    """
    ops = FUSED_SCORE_OPS if score_ops is None or "dropout" in score_ops else FUSED_SCORE_OPS[:1]
    return score_passes(ops, backward)
