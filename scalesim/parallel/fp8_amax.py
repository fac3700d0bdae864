"""Transformer Engine's delayed scaling: the amax all-reduce after each model chunk's forward and backward.

Under delayed scaling (DelayedScaling, scalesim's `fp8_recipe: transformer-engine`) every FP8 GEMM records
the amaxes of the tensors it casts into a global buffer, and TE reduces them across the autocast's group
before the next casts use them (transformer_engine/pytorch/fp8.py @v1.11, FP8GlobalStateManager;
pytorch/quantization.py @v2.9 (70f53666), the same code moved):

- forward: on leaving the outermost fp8_autocast (`fp8_autocast_exit` / `autocast_exit`, :428-435 @v1.11,
  :591-600 @v2.9) `reduce_and_update_fp8_tensors(forward=True)`; Megatron-Core wraps a TransformerBlock's
  whole forward in one autocast under the delayed recipe (megatron/core/transformer/transformer_block.py
  @core_v0.13.1 :551-556, `use_outer_fp8_context`), so once per micro-batch and model chunk;
- backward: in the backward of the autocast's first FP8 module (`reduce_and_update_bwd_fp8_tensors`,
  module/linear.py @v1.11 :602-603), the chunk's last backward GEMM, `forward=False`.

Each is `torch.cat` of the amaxes of every FP8 GEMM the rank holds, in all its chunks (`rank_gemms`: TE's
global buffer; 3 per GEMM forward: input, weight, output; 2 backward: the output's and
the input's gradients), `torch.distributed.all_reduce(..., op=MAX, async_op=False)` over the autocast's
group (`reduce_tensor_across_group_op_max`, :314-322 @v1.11), which the compute stream waits for, then one
fused kernel, `tex.fused_amax_and_scale_update_after_reduction`, for the new scales (:364-373 @v1.11). Megatron
passes the amax-reduction group, tensor x data x context parallel ranks of the stage
(fp8_utils.py get_fp8_context -> parallel_state.get_amax_reduction_group(with_context_parallel=True),
_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP, @core_v0.13.1 :1478-1486; tensor x context only with
tp_only_amax_red, which scalesim does not model). Priced with what exists: the all-reduce as any collective
(its dispatch is the collective task's), the cat and the update as two kernels at KERNEL_OVERHEAD_S and two
host dispatches. Left out: the recomputed forward's autocast (activation checkpointing: Megatron's te_checkpoint
re-enters `autocast` at depth 0 for every checkpointed region, distributed.py @v2.9 :419-423 and :755-758, so
each region's recompute ends in one more forward reduction, during the backward; no validation case runs delayed
scaling with full recompute) and the FP8 weights' update after the optimizer (fp8_param_gather under delayed
scaling).
"""

from __future__ import annotations

from scalesim.costs.coalesced import dense_part, expert_tensors, param_tensor_weights
from scalesim.costs.compute import KERNEL_OVERHEAD_S

# Amaxes a GEMM records (TE's fp8_meta: scaling_fwd input, weight, output; scaling_bwd grad output, grad input)
AMAXES = {"forward": 3, "backward": 2}
AMAX_BYTES = 4.0                 # fp32
UPDATE_KERNELS = 2               # torch.cat of the amaxes, the fused amax-and-scale update


def fp8_gemms(layers) -> int:
    """FP8 GEMMs of a model chunk: each block's GEMM weights (costs/coalesced.py; a grouped expert GEMM one
    per local expert, as TE's GroupedLinear records them); the output layer is no TE module in Megatron."""
    count = 0
    for layer in layers:
        if layer.kind == "transformer_block":
            count += sum(param_tensor_weights(dense_part(layer)))
            count += sum(weight for _, weight in expert_tensors(layer))
    return count


def amax_group(rp) -> tuple[int, ...]:
    """The ranks of this rank's pipeline stage (tensor x data x context parallel): Megatron's amax-reduction group."""
    pl, coords = rp.pl, rp.coords
    return tuple(sorted({pl.rank(**{**coords, "tp": t, "dp": d, "cp": c})
                         for t in range(pl.tp) for d in range(pl.dp) for c in range(pl.cp)}))


def rank_gemms(rp) -> int:
    """FP8 GEMMs of all the rank's model chunks: TE keeps one global amax buffer per autocast key (recipe and
    group; quantization.py @v2.9 add_fp8_tensors_to_global_buffer, :331-340 and :541-550), to which every
    module adds its amaxes once, and every chunk's autocast passes Megatron's same recipe and group, so each
    reduction concatenates the amaxes of every chunk the rank holds (virtual pipeline stages too), not only
    the chunk that ends it (TE v1.6 on; up to v1.5 a buffer per autocast, the chunk's own amaxes, reduced on
    entering the next autocast: the same count of reductions, smaller). Each layer's count is kept in the
    builder's memo (keyed by the layer object, as parallel/sharding.py keeps its layers)."""
    memo, count = rp.b.memo, 0
    for c in range(rp.plan.chunks_per_stage):
        for w in rp.b.chunk_work[c * rp.pl.pp + rp.stage]:
            known = memo.get(("fp8-amax-gemms", id(w.layer)))
            if known is None or known[0] is not w.layer:
                known = memo[("fp8-amax-gemms", id(w.layer))] = (w.layer, fp8_gemms((w.layer,)))
            count += known[1]
    return count


def reduced(rp, g: int, kind: str, dep: int | None) -> int | None:
    """After model chunk `g`'s `kind` pass (forward or backward, ending on `dep`): the delayed-scaling amax
    all-reduce and the scale update, in FP8 under delayed scaling; returns what comes next waits for."""
    if not (rp.plan.fp8_delayed_scaling and rp.plan.precision == "fp8"):
        return dep
    gemms = rank_gemms(rp)
    if gemms == 0:
        return dep
    size = AMAXES[kind] * gemms * AMAX_BYTES
    reduce = rp.call("fp8_amax_" + kind, "all_reduce", amax_group(rp), size, "amax", (dep,), ("tp", "dp", "cp"))
    return rp.compute(f"fp8 amax update ({kind})", "other", UPDATE_KERNELS * KERNEL_OVERHEAD_S, 0.0,
                      deps=(dep if reduce is None else reduce,), host_s=UPDATE_KERNELS * rp.plan.host_dispatch_s)
