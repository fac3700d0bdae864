"""Transformer Engine's tensor-parallel communication overlap (userbuffers, `ub_tp_comm_overlap`).

With sequence parallelism Megatron-Core / NeMo with `tp_comm_overlap` (NeMo `ub_tp_comm_overlap`,
MLPerf `TP_COMM_OVERLAP=True`) no longer calls NCCL around each block half: Transformer Engine
splits the GEMM next to each collective and pipelines the two (transformer_engine/pytorch/module/
base.py `initialize_ub` and csrc/comm_gemm_overlap.h, TE v1.9):

- all-gather before the first GEMM of a half (qkv_fprop, fc1_fprop) and of the gradient before the
  last GEMM's data-gradient (proj_dgrad, fc2_dgrad): `ring_exchange`. The GEMM runs in tp chunks,
  the first on the local shard; while chunk k runs, the shard chunk k+1 needs is copied from the ring
  neighbour by the copy engine (`use_ce: True`, no SMs held). Time: g + (tp-1) * max(g, a) for
  chunk GEMM g and step transfer a. These all-gathers carry FP8 under an FP8 recipe ("AllGather
  buffers use fp8 when using fp8 recipe": qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad).
- reduce-scatter after the last GEMM (proj_fprop, fc2_fprop): `pipeline`. The GEMM runs in
  num_splits chunks; chunk i's reduce-scatter
  runs on num_sm SMs while chunk i+1 computes; the last chunk's is exposed ("Last communication
  chunk with max SM": UB_MAX_SM = 32). Time: G/n + (n-1) * max(G/n, r) + r. With `set_sm_margin` (the
  scenarios' NVIDIA configs set it) every GEMM chunk is launched on the SMs the reduce-scatter leaves,
  the first too (`sm_margin`); without it the GEMM runs on all SMs and shares them while a chunk's
  reduce-scatter runs.
- the input of the first GEMM gathered again for its weight gradient (qkv_dgrad, fc1_dgrad): `bulk`, on
  num_sm SMs beside that GEMM's data-gradient GEMM, which the stream then waits for (comm_gemm_overlap.h
  `bulk_overlap`: the main stream waits on `_stop_comm`); FP8 under an FP8 recipe (an all-gather buffer).
  Not with frozen base weights (LoRA): TE gathers only when the weight needs a gradient (`requires_wgrad`).
- the data-gradient reduce-scatter of the first GEMM (qkv_wgrad, fc1_wgrad): `bulk`, on num_sm SMs
  beside that GEMM's weight-gradient GEMM; with frozen base weights (LoRA) there is none to hide it.

A chunked GEMM's FP8 input is cast once, before the pipeline, not per chunk: TE quantizes the local input
(`inputmat = input_quantizer(inputmat)`, transformer_engine/pytorch/module/linear.py @40c69e75 lines 194
and 227) and then makes the one `general_gemm(..., ub=ub_obj)` call (line 309) whose chunks the userbuffers
pipeline runs. The chunks of a gated MLP's fc1 are one GEMM of 2 x ffn columns: Megatron-Core builds
`linear_fc1` with `ffn_hidden_size *= 2` under `gated_linear_unit` (megatron/core/transformer/mlp.py
@core_v0.14.0 lines 94-97), scalesim's block models it as `mlp_gate` and `mlp_up` (the second sharing the
first's FP8 cast, `cast_share` 0).

Each pipeline is played as a time-equivalent task graph: the transfers of all but one chunk run on
the "tp" stream beside the GEMM's other chunks, so the engine still times the transfers on the
links and slows the GEMM for the SMs a reduce-scatter holds. The transfers are timed as the NCCL
call of the same bytes on the same GPUs (the same NVLink ports). Not modelled: FP8 reduce-scatter
buffers (`fp8_buf`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalesim.costs.compute import fp8_cast_s, op_time_s

# The GEMM each half's collectives sit beside (scalesim/models/transformer.py op names).
GEMMS_IN = ("qkv", "mlp_gate", "mlp_up")
GEMMS_OUT = ("attn_out", "mlp_down")
# A gated MLP's two input projections, one linear_fc1 GEMM in Megatron-Core (module docstring).
FUSED_FC1 = ("mlp_gate", "mlp_up")
UB_MAX_SM = 32          # SMs of the last reduce-scatter chunk (comm_gemm_overlap.h, TE v1.9)


@dataclass(frozen=True, slots=True)
class TpOverlapSpec:
    """A userbuffers configuration (NeMo's `ub_tp_comm_overlap_cfg`): reduce-scatter chunks and the
    SMs each overlapped reduce-scatter holds. Defaults: TE v1.9 `initialize_ub` get_default_config
    (pipeline and bulk num_sm 16, num_splits 4)."""

    num_splits: int = 4
    proj_fprop_sms: int = 16
    fc2_fprop_sms: int = 16
    qkv_wgrad_sms: int = 16
    fc1_wgrad_sms: int = 16
    qkv_dgrad_sms: int = 16         # bulk all-gather of the half's input for its weight gradient
    fc1_dgrad_sms: int = 16
    # proj_fprop / fc2_fprop by `ring_exchange` instead (split_overlap_rs_p2p): tp chunks of the
    # tokens, each partial output sent to the ring neighbour by the copy engine
    proj_fprop_ring: bool = False
    fc2_fprop_ring: bool = False
    # `set_sm_margin` of the pipelined reduce-scatters (TE default False): every GEMM chunk of proj_fprop /
    # fc2_fprop runs on sm_count - num_sm SMs, not only while a reduce-scatter chunk runs beside it
    sm_margin: bool = False


def tp_overlap_spec(cfg) -> TpOverlapSpec | None:
    """The plan's spec from a scenario's `tp_comm_overlap` (False, or its validated mapping)."""
    if not cfg:
        return None
    fields = cfg.model_dump()
    ring = {f"{name}_ring": fields.pop(f"{name}_method") == "ring_exchange" for name in ("proj_fprop", "fc2_fprop")}
    return TpOverlapSpec(**fields, **ring)


def applies(rp, work) -> bool:
    """Whether this layer's TP collectives overlap: a dense transformer block under sequence
    parallelism in Megatron's (s, b, h) layout with plan.tp_overlap set."""
    plan = rp.plan
    return (plan.tp_overlap is not None and rp.sp and work.is_block and not work.moe
            and plan.sequence_parallel_layout == "seq-first" and len(work.halves) == 2
            and all(_pieces(rp.b, h) is not None for h in work.halves))


def _pieces(b, half):
    """The half cut as (before, first GEMM, between, last GEMM, after), each a LayerSpec or None when
    empty; None when the half lacks either GEMM. One set of objects per half (the builder's memo)."""
    key = ("tp-overlap-pieces", half.kind, half.ops)
    if key not in b.memo:
        names = [op.name for op in half.ops]
        first = [i for i, n in enumerate(names) if n in GEMMS_IN]
        last = [i for i, n in enumerate(names) if n in GEMMS_OUT]
        if not first or not last or max(first) >= min(last) or max(first) - min(first) + 1 != len(first):
            b.memo[key] = None
        else:
            cuts = (0, min(first), max(first) + 1, min(last), max(last) + 1, len(names))
            b.memo[key] = tuple(replace(half, name=f"{half.name}.{label}", ops=half.ops[lo:hi]) if hi > lo else None
                                for label, lo, hi in zip(("pre", "in", "mid", "out", "post"), cuts, cuts[1:]))
    return b.memo[key]


def _chunked(b, piece, split: str, parts: int) -> float:
    """How much longer the piece's GEMMs take run as `parts` chunks of their rows (split "m": the
    ring exchange's gathered tokens) or columns ("n": the pipelined reduce-scatter's output features,
    `m_chunk = m / _num_splits` of TE's column-major output): each chunk at its own shape's efficiency
    (costs/compute.py: fewer tiles in the last wave)."""
    plan = b.plan
    key = ("tp-overlap-chunked", b.gpu, plan.precision, plan.micro_batch, piece.ops, split, parts)
    if key not in b.memo:
        whole = chunked = 0.0
        for op in piece.ops:
            if op.gemm_mnk is None:
                continue
            whole += op_time_s(op, b.gpu, plan.precision, plan.micro_batch)
        for op in _fused_gemms(piece.ops):
            m, n, k = op.gemm_mnk
            shape = (max(1, m // parts), n, k) if split == "m" else (m, max(1, n // parts), k)
            # the input's FP8 cast runs once on the whole input, before the chunks (module docstring)
            cast = fp8_cast_s(op, b.gpu, plan.micro_batch) if plan.precision == "fp8" else 0.0
            part = replace(op, gemm_mnk=shape, flop=op.flop / parts, cast_share=0.0)
            chunked += parts * op_time_s(part, b.gpu, plan.precision, plan.micro_batch) + cast
        b.memo[key] = chunked / whole if whole > 0 else 1.0
    return b.memo[key]


def _fused_gemms(ops) -> list:
    """The GEMMs of `ops` as Megatron-Core runs them: a gated MLP's `mlp_up` joined to the `mlp_gate` before it
    (same rows and depth), one `linear_fc1` GEMM of their columns (module docstring)."""
    gemms = []
    for op in ops:
        if op.gemm_mnk is None:
            continue
        prev = gemms[-1] if gemms else None
        if (prev is not None and (prev.name, op.name) == FUSED_FC1 and not op.parts and not prev.parts
                and op.gemm_mnk[0] == prev.gemm_mnk[0] and op.gemm_mnk[2] == prev.gemm_mnk[2]):
            m, n, k = prev.gemm_mnk
            gemms[-1] = replace(prev, gemm_mnk=(m, n + op.gemm_mnk[1], k), flop=prev.flop + op.flop)
        else:
            gemms.append(op)
    return gemms


def _margin(b, piece, attr: str, sms: int) -> float:
    """How much longer the piece's GEMMs take launched on the SMs a pipelined reduce-scatter leaves:
    with `set_sm_margin` TE launches each chunk's GEMM on sm_count - num_sm SMs, the first chunk and
    the last alike, whether or not a reduce-scatter chunk is running (transformer_engine/pytorch/csrc/
    comm_gemm_overlap.h, TE v1.9, line 218: `_math_sms = (set_sm_margin) ? prop.multiProcessorCount -
    num_comm_sm : prop.multiProcessorCount`, passed to every chunk's GEMM)."""
    whole = getattr(b._layer_time(piece), attr)
    return getattr(b._layer_time(piece, held_sms=sms), attr) / whole if whole > 0 else 1.0


def _call(rp, op: str, size: float, deps, sms: int) -> int | None:
    """A TP collective on the "tp" stream holding `sms` SMs (0: the copy engine); userbuffers, not an
    NCCL communicator, so no nccl_max_ctas limit applies."""
    t = rp.call("tp", op, rp.tp_group, size, "tp", tuple(d for d in deps if d is not None), ("tp",), "userbuffers")
    if t is not None:
        rp.list[t] = replace(rp.list[t], sm_share=min(sms, rp.b.gpu.sms) / rp.b.gpu.sms if rp.b.gpu.sms else 0.0)
    return t


def overlapped_half(rp, work, i: int, kind: str, attr: str, deps, name: str, flop: float) -> tuple[int, int]:
    """Half `i` of a block in a `kind` pass (`attr`: its LayerTime field) with its TP collectives
    pipelined into its GEMMs; returns (its first compute task, what the next step waits for)."""
    b, spec, tp = rp.b, rp.plan.tp_overlap, len(rp.tp_group)
    pieces = _pieces(b, work.halves[i])
    sec = [getattr(b._layer_time(p), attr) if p is not None else 0.0 for p in pieces]
    rows = [rp.layer_row((p,), kind) if p is not None else None for p in pieces]
    size = b.activation_bytes
    gathered = size / 2 if rp.plan.precision == "fp8" else size     # FP8 all-gather buffers
    host = work.host_s[i][kind]
    deps = tuple(d for d in deps if d is not None)

    def run(label, seconds, row, after, f=0.0, host_s=0.0):
        return rp.compute(f"{name} {label}", kind, seconds, f, tuple(d for d in after if d is not None),
                          host_s=host_s, held=row)

    ring = spec.proj_fprop_ring if i == 0 else spec.fc2_fprop_ring
    n = tp if ring else spec.num_splits
    if kind != "backward":
        sms = 0 if ring else spec.proj_fprop_sms if i == 0 else spec.fc2_fprop_sms
        sec[1] *= _chunked(b, pieces[1], "m", tp)
        sec[3] *= _chunked(b, pieces[3], "m" if ring else "n", n)
        if spec.sm_margin and sms:
            sec[3] *= _margin(b, pieces[3], attr, sms)
        pre = run("pre", sec[0], rows[0], deps, host_s=host) if pieces[0] is not None or host else None
        start = (pre,) if pre is not None else deps
        ag = _call(rp, "all_gather", gathered, start, 0)
        x = run("gemm chunks 1..tp-1", sec[1] * (tp - 1) / tp, rows[1], start)
        y = run("gemm chunk tp + core + chunk 1", sec[1] / tp + sec[2] + sec[3] / n, rows[2] or rows[3],
                (x, ag), flop)
        # with the margin the GEMM chunks already leave the reduce-scatter its SMs (timed above)
        rs_a = _call(rp, "reduce_scatter", size * (n - 1) / n, (y,), 0 if spec.sm_margin else sms)
        z = run("gemm chunks 2..n", sec[3] * (n - 1) / n, rows[3], (y,))
        rs_b = _call(rp, "reduce_scatter", size / n, (z, rs_a), 0 if ring else UB_MAX_SM)
        end = run("post", sec[4], rows[4], (rs_b,)) if pieces[4] is not None else rs_b
        return (pre if pre is not None else x), end
    # backward: after's ops, the last GEMM's data gradient under the gradient's ring all-gather, the
    # core, the first GEMM's data gradient, then its weight gradient beside the bulk reduce-scatter.
    frozen = rp.plan.finetune is not None
    post = run("post", sec[4], rows[4], deps, host_s=host)
    ag = _call(rp, "all_gather", gathered, (post,), 0)
    out_dgrad = (sec[3] if frozen else sec[3] / 2) * _chunked(b, pieces[3], "m", tp)
    x = run("dgrad chunks 1..tp-1", out_dgrad * (tp - 1) / tp, rows[3], (post,))
    in_wgrad = 0.0 if frozen else sec[1] / 2
    out_wgrad = 0.0 if frozen else sec[3] / 2
    if frozen:
        y = run("dgrad", out_dgrad / tp + out_wgrad + sec[2] + sec[1] - in_wgrad, rows[2] or rows[1], (x, ag), flop)
    else:                   # the first GEMM's data gradient beside the bulk all-gather of its input
        core = run("dgrad", out_dgrad / tp + out_wgrad + sec[2], rows[2] or rows[3], (x, ag), flop)
        again = _call(rp, "all_gather", gathered, (core,), spec.qkv_dgrad_sms if i == 0 else spec.fc1_dgrad_sms)
        y = run("first GEMM dgrad", sec[1] - in_wgrad, rows[1], (core,))
        y = rp.compute(f"{name} dgrad joined", kind, 0.0, 0.0, tuple(d for d in (y, again) if d is not None))
    rs = _call(rp, "reduce_scatter", size, (y,), spec.qkv_wgrad_sms if i == 0 else spec.fc1_wgrad_sms)
    z = run("wgrad", in_wgrad, rows[1], (y,)) if in_wgrad > 0 else None
    end = run("pre", sec[0], rows[0], (z, rs)) if pieces[0] is not None else rs
    return post, end
