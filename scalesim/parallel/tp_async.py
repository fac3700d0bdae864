"""nanotron's async tensor-parallel linears in forward (`tp_linear_async_communication: true`, REDUCE_SCATTER mode).

nanotron's `_ColumnLinearAsyncCommunication.forward` (src/nanotron/parallel/tensor_parallel/functional.py
@67c5ebb6, the branch its benchmark sweep ran; scaling_benchmarks.py sets tp_linear_async_communication
whenever tp_mode is REDUCE_SCATTER, with CUDA_DEVICE_MAX_CONNECTIONS=1 in run_multinode.sh) launches the
sequence-parallel all-gather of a half's input asynchronously and meanwhile multiplies the rows this rank
already holds ("Compute a shard of column_linear in the same time of AllGather"); after `handle.wait()` it
multiplies the gathered rows of the other ranks. The row-parallel linear's forward reduce-scatter stays
blocking (`differentiable_reduce_scatter_sum`). Its backward is parallel/sp_backward.py's.

The shard GEMMs are timed as 1/tp and (tp-1)/tp of the whole GEMM (their smaller shapes' efficiency is
not charged).
"""

from __future__ import annotations

from scalesim.parallel import sp_backward, tp_overlap


def applies(rp, work) -> tuple[int, ...]:
    """The parts of this layer whose input all-gather runs beside the local shard's GEMM."""
    return sp_backward.applies(rp, work) if rp.plan.tp_async else ()


def forward_half(rp, work, i: int, kind: str, attr: str, deps, name: str, flop: float) -> tuple[int, int]:
    """Half `i` in a `kind` pass (`attr`: its LayerTime field): its norm, the input all-gather beside the
    local rows' GEMM, the rest, the reduce-scatter; returns (its first compute task, what comes next waits for)."""
    b, tp = rp.b, len(rp.tp_group)
    pieces = tp_overlap._pieces(b, work.halves[i])
    sec = [getattr(b._layer_time(p), attr) if p is not None else 0.0 for p in pieces]
    deps = tuple(d for d in deps if d is not None)

    def run(label, seconds, layers, after, f=0.0, host_s=0.0):
        row = rp.layer_row(tuple(p for p in layers if p is not None), kind) if any(layers) else None
        return rp.compute(f"{name} {label}", kind, seconds, f, tuple(d for d in after if d is not None),
                          host_s=host_s, held=row)

    pre = run("pre", sec[0], pieces[:1], deps, host_s=work.host_s[i][kind])
    gathered = rp.tp_op("all_gather", (pre,), kind)
    local = run("first GEMM, local rows", sec[1] / tp, pieces[1:2], (pre,))
    rest = run("first GEMM, gathered rows + core + last GEMM", sec[1] * (tp - 1) / tp + sec[2] + sec[3],
               pieces[1:4], (local, gathered), flop)
    scattered = rp.tp_op("reduce_scatter", (rest,), kind)
    return pre, (run("post", sec[4], pieces[4:], (scattered,)) if pieces[4] is not None else scattered)
