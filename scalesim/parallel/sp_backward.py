"""A block half's backward under sequence parallelism as Megatron-LM, Transformer Engine and nanotron run it
(`parallel.sequence_parallel_backward: split`; the default, fused, times it as one blocking all-reduce: the
same validate median at half the simulated tasks).

With sequence parallelism the column-parallel linear opening each half (qkv, fc1) gathers its
sequence-sharded input in forward but keeps only the local shard for backward, so its weight
gradient needs the input gathered again. All three frameworks issue, per half, in backward:

1. the row-parallel linear's (attn_out, fc2) output-gradient all-gather, the backward of the
   forward's reduce-scatter, before that linear's data gradient; the stream waits for it;
2. the column-parallel linear's input all-gather, launched asynchronously before its data-gradient
   GEMM, which runs beside it ("we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather
   is scheduled before the input gradient computation"); the weight-gradient GEMM waits for it;
3. the data gradient's reduce-scatter, launched asynchronously after the data-gradient GEMM, beside
   the weight-gradient GEMM; the norm's backward (the half's first op) waits for both.

Sources: Megatron-LM megatron/core/tensor_parallel/layers.py
`LinearWithGradAccumulationAndAsyncCommunication.backward` (local spec); Transformer Engine
pytorch/module/layernorm_linear.py and layernorm_mlp.py `backward` (Megatron-Core's TE spec, NeMo:
`gather_along_first_dim(ln_out, ..., async_op=True)` before the dgrad GEMM, `ln_out_total_work.wait()`
before the wgrad GEMM, `reduce_scatter_along_first_dim(dgrad, ..., async_op=True)` beside it; under an
FP8 recipe the input is gathered through its quantizer, one byte an element, the FP8 copy TE keeps for
backward); nanotron src/nanotron/parallel/tensor_parallel/functional.py `_ColumnLinearAsyncCommunication.
backward` with `tp_recompute_allgather` (default True, config/parallelism_config.py) @67c5ebb6, the
branch its benchmark sweep ran with `tp_linear_async_communication: true`. torch DTensor plans
(torchtitan, `sequence_parallel_layout: batch-first`) keep the gathered input for backward instead:
their backward is the output-gradient all-gather and the input-gradient reduce-scatter, timed as the
all-reduce after the half (rank_program.py), and does not come here.

nanotron's async linears (`tp_linear_async_communication`, parallel/tp_async.py) also run the row-parallel
linear's data gradient on the local shard of the output gradient while the rest is gathered
(`_RowLinearAsyncCommunication.backward`: the local shard's mm, then `handle.wait()`).

In MoE blocks only the attention part (its qkv linear); not with LoRA (frozen base weights need no input
for a weight gradient, TE gathers only `requires_wgrad`). Under Transformer Engine's userbuffers overlap
the same gather is a bulk all-gather (tp_overlap.py).
"""

from __future__ import annotations

from scalesim.parallel import tp_overlap
from scalesim.program import ComputeTask


def applies(rp, work) -> tuple[int, ...]:
    """The parts of this layer whose backward gathers their input again: both halves of a dense transformer
    block, the attention part of an MoE block (its experts' linears are not sequence-parallel ones), under
    sequence parallelism in Megatron's (s, b, h) layout, fully trained, with NCCL (not userbuffers) TP
    collectives; () otherwise."""
    plan = rp.plan
    if plan.sp_backward != "split":      # `parallel.sequence_parallel_backward` (tp_async implies it: app/setup.py)
        return ()
    if not (rp.sp and work.is_block and plan.sequence_parallel_layout == "seq-first" and plan.finetune is None
            and not tp_overlap.applies(rp, work)):
        return ()
    parts = (0,) if work.moe else (0, 1) if len(work.halves) == 2 else ()
    return parts if all(tp_overlap._pieces(rp.b, work.halves[i]) is not None for i in parts) else ()


def regathered_bytes(rp) -> float:
    """Bytes of a half's input gathered again for its weight gradient: FP8 under an FP8 recipe (TE gathers
    the quantized copy it saved), the activations' own bytes otherwise."""
    whole = rp.b.activation_bytes
    return whole / 2 if rp.plan.precision == "fp8" else whole


def backward_half(rp, work, i: int, deps, name: str, flop: float) -> tuple[int, int]:
    """Half `i`'s backward with its three TP collectives (module docstring); returns (its first compute
    task, what the next step waits for). The first GEMM's backward splits evenly into its data and
    weight gradients (the same m x n x k)."""
    b = rp.b
    pieces = tp_overlap._pieces(b, work.halves[i])
    sec = [b._layer_time(p).backward_s if p is not None else 0.0 for p in pieces]
    rows = [rp.layer_row((p,), "backward") if p is not None else None for p in pieces]
    deps = tuple(d for d in deps if d is not None)

    def run(label, seconds, row, after, f=0.0, host_s=0.0):
        return rp.compute(f"{name} {label}", "backward", seconds, f, tuple(d for d in after if d is not None),
                          host_s=host_s, held=row)

    def tp(op, size, after):
        return rp.call("tp", op, rp.tp_group, size, "tp", tuple(d for d in after if d is not None), ("tp",))

    size = b.activation_bytes
    post = run("post", sec[4], rows[4], deps, host_s=work.host_s[i]["backward"])
    grad = tp("all_gather", size, (post,))                     # 1. the output gradient, waited for
    local = None
    if rp.plan.tp_async:    # nanotron's _RowLinearAsyncCommunication: the local shard's dgrad beside the gather
        local = run("last GEMM dgrad, local shard", sec[3] / 2 / len(rp.tp_group), rows[3], (post,))
        sec[3] -= sec[3] / 2 / len(rp.tp_group)
    core = run("out + core", sec[3] + sec[2], rp.layer_row(tuple(p for p in pieces[2:4] if p is not None), "backward"),
               (grad, local), flop)
    # 2. the input again, beside the dgrad; none where the linear kept it (nanotron tp_recompute_allgather: false)
    again = None if rp.plan.tp_saves_gathered_inputs else tp("all_gather", regathered_bytes(rp), (core,))
    dgrad = run("first GEMM dgrad", sec[1] / 2, rows[1], (core,))
    scatter = tp("reduce_scatter", size, (dgrad, again))       # 3. the input gradient, beside the wgrad
    wgrad = run("first GEMM wgrad", sec[1] / 2, rows[1], (dgrad, again))
    if pieces[0] is not None:
        return post, run("pre", sec[0], rows[0], (wgrad, scatter))
    rp.list.append(ComputeTask(f"{name} joined", "other", 0.0, deps=tuple(d for d in (wgrad, scatter) if d is not None)))
    return post, len(rp.list) - 1
