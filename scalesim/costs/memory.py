"""Memory one GPU needs for training: weights, gradients, optimizer, activations.

Mixed-precision Adam holds 16 bytes per parameter: 16-bit weights (2) and
gradients (2), fp32 master weights, momentum and variance (12) (Rajbhandari
et al. 2020, ZeRO, sec. 3.1). Pure fp32 training: weights, gradients, m, v
at 4 bytes each. Activations follow Korthikanti et al. 2022 (eq. 1) as each
layer reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.models.spec import ModelSpec

# CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers: a CUDA context alone
# takes ~300-500 MiB and NCCL allocates channel buffers per peer; 1 GiB in all
# is a common rule of thumb (PyTorch memory docs; DeepSpeed memory estimators
# leave a similar margin). An estimate, not a measurement.
FRAMEWORK_OVERHEAD_BYTES = 1.0 * 2**30
# The caching allocator's fragmentation on top of live tensors (~5-10% in
# PyTorch memory snapshots); we take the low end.
FRAGMENTATION = 0.05


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights: float
    gradients: float
    optimizer: float
    grad_buckets: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.grad_buckets
                + self.activations + self.overhead)

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "grad_buckets": self.grad_buckets, "activations": self.activations,
                "overhead": self.overhead}


def state_bytes_per_param(precision: str, optimizer: str) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes per parameter."""
    full = precision in ("fp32", "tf32")
    w = g = 4.0 if full else 2.0
    if optimizer == "sgd":
        opt = 4.0 if full else 8.0          # momentum (+ fp32 master in mixed precision)
    else:
        opt = 8.0 if full else 12.0         # m, v (+ fp32 master in mixed precision)
    return w, g, opt


def activation_bytes(model: ModelSpec, micro_batch: int, precision: str, checkpointing: str,
                     flash_attention: bool) -> float:
    """Activations held at the peak of backward for one micro-batch.

    none: every layer's saved tensors; selective: attention scores are
    recomputed, not stored; full: only each layer's input (2*s*h bytes per
    sample in 16-bit) is kept, plus one layer's full activations while it
    is recomputed.
    """
    scale = 2.0 if precision in ("fp32", "tf32") else 1.0
    per_layer = []
    for layer in model.layers:
        scores = layer.attention_score_bytes if (not flash_attention and checkpointing == "none") else 0.0
        per_layer.append((layer.activation_bytes + scores) * micro_batch * scale)
    if checkpointing != "full":
        return sum(per_layer)
    hidden = model.hidden or 0
    tokens = model.tokens_per_sample or 0
    boundary = 2.0 * tokens * hidden * micro_batch * scale
    blocks = [a for layer, a in zip(model.layers, per_layer) if layer.kind == "transformer_block"]
    others = sum(a for layer, a in zip(model.layers, per_layer) if layer.kind != "transformer_block")
    return boundary * len(blocks) + max(blocks, default=0.0) + others


def memory_per_gpu(model: ModelSpec, *, micro_batch: int, precision: str, optimizer: str,
                   checkpointing: str, ddp_buckets: bool, flash_attention: bool | None = None) -> MemoryBreakdown:
    """Peak memory of one data-parallel rank holding the whole model."""
    params = model.params
    w, g, o = state_bytes_per_param(precision, optimizer)
    flash = precision not in ("fp32", "tf32") if flash_attention is None else flash_attention
    acts = activation_bytes(model, micro_batch, precision, checkpointing, flash)
    # PyTorch DDP copies gradients into flat bucket buffers
    # (gradient_as_bucket_view=False by default): one more gradient-sized buffer.
    buckets = params * g if ddp_buckets else 0.0
    live = params * (w + g + o) + buckets + acts
    return MemoryBreakdown(params * w, params * g, params * o, buckets, acts,
                           FRAMEWORK_OVERHEAD_BYTES + FRAGMENTATION * live)
