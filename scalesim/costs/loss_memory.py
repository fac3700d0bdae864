"""Memory the loss holds at its peak, by how the cross-entropy is computed (training.cross_entropy).

Counted per logit element of the micro-batch on one GPU (the output head's logits, already split by
tensor and context parallelism), beyond what the head's own activations keep.
"""

from __future__ import annotations

# Bytes per logit element live at the loss's peak, by cross-entropy implementation (16-bit logits):
# fused: Megatron-LM's vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py) casts the
#   logits to fp32 (4) while the 16-bit logits (2) are live, then exponentiates and normalises in
#   place and keeps that softmax (4) for backward, whose gradient it writes in place: peak 6.
# fp32-upcast: nanotron's sharded_cross_entropy(..., dtype=torch.float) (parallel/tensor_parallel/
#   functional.py): 16-bit logits (2), their fp32 cast (4) and the max-shifted fp32 copy (4) that
#   becomes the kept softmax: peak 10; backward again in place.
# eager: F.cross_entropy(logits.float(), labels) (torchtitan's loss without tensor parallelism):
#   log_softmax keeps its fp32 output (4); backward allocates nll_loss's dense fp32 gradient (4)
#   and log_softmax's fp32 input gradient (4) while that output is still held: peak 12.
# compiled: F.cross_entropy(logits.float(), labels) under torch.compile (torchtitan components/loss.py
#   build_cross_entropy_loss compiles it with --training.compile, @e7c0cae; at 9dec370 train.py left it eager:
#   "compiling loss function causes CUDA errors"). Inductor fuses the upcast, log-softmax and nll: no fp32 copy
#   is written. MEASURED (apple/ml-cross-entropy README benchmark, A100, PyTorch 2.4.1, 8192 tokens x 256000
#   vocab = 2.1e9 logits): loss forward+backward 16000 MB compiled vs 28000 MB eager, 6 bytes a logit less
#   than eager: peak 12 - 6 = 6.
# loss-parallel: the eager loss on vocab-sharded logits under torch's loss_parallel() (torchtitan with
#   tensor parallelism: parallel_dims.loss_parallel_enabled = tp > 1 and not --training.disable_loss_parallel,
#   @9dec370). torch/distributed/tensor/parallel/loss.py replaces both steps: `_log_softmax` writes
#   `shifted = x - x_max`, a transient `exp(shifted)` and `result = shifted - logsumexp` beside the fp32
#   input, all fp32; `_nll_loss_and_log_softmax_backward` (log-softmax backward fused into nll's) holds the
#   kept log-softmax output (4) while it builds `grad_input = zeros_like(x)` (4), `torch.exp(x)` (4) and
#   their sum (4), then the product with grad_output: peak 16 in backward (torchtitan's train step deletes
#   the 16-bit logits before backward; 14 with them in forward).
# hf-causal-lm: Hugging Face's causal-LM loss as transformers 4.36-4.44 LlamaForCausalLM.forward runs it:
#   `logits = logits.float()` is returned in the model's output, which the training loop keeps until after
#   backward (AnswerDotAI fsdp_qlora train.py: `output = model(...)`, `loss.backward()`, then `output = None`),
#   and the loss runs on a `.contiguous()` shifted copy: the eager peak (12) with the kept fp32 logits (4)
#   beside it: 16.
CROSS_ENTROPY_PEAK_BYTES = {"fused": 6.0, "fp32-upcast": 10.0, "eager": 12.0, "compiled": 6.0,
                            "loss-parallel": 16.0, "hf-causal-lm": 16.0}
# What the heads' activation_bytes already keep per logit element (fp32 logits, Korthikanti et al.
# 2022 sec. 4.3): the loss adds its peak beyond these, once, at the end of forward.
HEAD_LOGIT_BYTES = 4.0


# The 16-bit logits' own block, freed before the loss's backward and kept by the caching allocator
# through that backward's peak, bytes per logit element: what max_memory_reserved counts beyond the live
# peak above. torchtitan's train step (train.py @9dec370: `loss = loss_fn(pred, labels)`, `del pred`,
# `loss.backward()`) and Hugging Face's causal-LM forward (`logits = logits.float()`) drop the model's
# 16-bit logits once the fp32 copy exists, so their block (2 bytes a logit) is free from then on. Every
# request at the loss's backward peak is a whole fp32 logit tensor, twice that size (nll_loss's gradient,
# log-softmax's input gradient; loss_parallel's zeros, exp and sum), and a free block serves only requests
# no larger than itself (c10/cuda/CUDACachingAllocator.cpp, get_free_block: the smallest cached block >=
# the rounded size), so the caching allocator cudaMallocs new segments beside it and the free block stays
# in max_memory_reserved (with expandable_segments:True, torchtitan's run_llama_train.sh @9dec370, alike: a
# free block grows only at its segment's end, and the fp32 tensors allocated after the logits lie beyond it). Without the free it is reused: Megatron-LM's fused and nanotron's fp32-upcast
# losses hold their 16-bit logits live (already in their peaks above); an fp32 model has no separate copy
# (`.float()` returns the logits themselves); a compiled loss fuses the cast (nothing freed early).
FREED_LOGIT_BYTES = {"eager": 2.0, "loss-parallel": 2.0, "hf-causal-lm": 2.0}


def _logit_elements(layers) -> float:
    # Several heads (DeepSeek-V3's multi-token prediction beside the main head) each keep their own
    # logits in their activations, but their losses' transient peaks come one after another: the
    # largest counts, not the sum.
    return max((sum(op.elements_moved / 2 for op in layer.ops if op.name == "cross_entropy") for layer in layers),
               default=0.0)


def loss_cached_bytes(layers, micro_batch: int, cross_entropy: str, precision: str) -> float:
    """Bytes of freed 16-bit logits the caching allocator still holds at the loss's backward peak
    (FREED_LOGIT_BYTES), for one micro-batch on a GPU holding `layers`: reserved, not live.

    >>> from scalesim.models.transformer import lm_head
    >>> head = lm_head(4, 8, 100, tied=False)
    >>> loss_cached_bytes([head], 1, "eager", "bf16") == 2 * 4 * 100
    True
    >>> loss_cached_bytes([head], 1, "fused", "bf16"), loss_cached_bytes([head], 1, "eager", "fp32")
    (0.0, 0.0)
    """
    if precision in ("fp32", "tf32"):
        return 0.0
    return _logit_elements(layers) * micro_batch * FREED_LOGIT_BYTES.get(cross_entropy, 0.0)


def loss_peak_bytes(layers, micro_batch: int, cross_entropy: str = "fused") -> float:
    """Bytes the loss holds at its peak beyond what the head keeps, for one micro-batch, on a GPU
    holding `layers` (0 unless the head is among them; logits already split by TP / CP).

    >>> from scalesim.models.transformer import lm_head
    >>> head = lm_head(4, 8, 100, tied=False)
    >>> loss_peak_bytes([head], 1, "eager") == 8 * 4 * 100, loss_peak_bytes([head], 1, "fused") == 2 * 4 * 100
    (True, True)
    >>> loss_peak_bytes([head, head], 1, "eager") == loss_peak_bytes([head], 1, "eager")   # one after another
    True
    """
    extra = CROSS_ENTROPY_PEAK_BYTES[cross_entropy] - HEAD_LOGIT_BYTES
    return _logit_elements(layers) * micro_batch * extra
