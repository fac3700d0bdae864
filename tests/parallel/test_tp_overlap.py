"""Transformer Engine's userbuffers TP overlap (parallel/tp_overlap.py): the sequence-parallel collectives
pipelined into the GEMMs beside them."""

import pytest

from scalesim.engine import simulate
from scalesim.errors import InputError
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.parallel.tp_overlap import TpOverlapSpec
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.schema import validate
from scalesim.scenario import ParallelSpec
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 4096, "heads": 32, "vocab": 1000,
                   "ffn": "swiglu", "ffn_hidden": 11008}, seq_len=4096)


def program(overlap: TpOverlapSpec | None, finetune=None, ctas=()):
    plan = ParallelPlan(Placement(tp=4, cp=1, dp=1, pp=1), 1, 1, "bf16", "adamw", "none", "flash", sp_backward="split",
                        sequence_parallel=True, tp_overlap=overlap, finetune=finetune, nccl_max_ctas=ctas)
    return build_program(MODEL, DGX.gpu_spec, DGX, plan)


def tp_calls(prog):
    return [t for t in prog.tasks[0] if isinstance(t, CollectiveTask) and t.name.startswith("tp ")]


def test_overlap_hides_tp_communication_but_no_more_than_it_takes():
    blocking, overlapped = program(None), program(TpOverlapSpec())
    slow, fast = simulate(blocking).end_s, simulate(overlapped).end_s
    assert fast < slow
    # the overlapped step still does all the blocking step's compute (chunked GEMMs only lose efficiency)
    compute = sum(t.duration_s for t in blocking.tasks[0] if isinstance(t, ComputeTask))
    assert sum(t.duration_s for t in overlapped.tasks[0] if isinstance(t, ComputeTask)) >= compute * 0.999
    assert fast >= compute * 0.999


def test_same_bytes_move_and_the_exchange_uses_copy_engines():
    blocking, overlapped = tp_calls(program(None)), tp_calls(program(TpOverlapSpec(proj_fprop_sms=24)))
    moved = lambda calls, op: sum(t.plan.size_bytes for t in calls if t.plan.op == op)   # noqa: E731
    # forward: an all-gather and a reduce-scatter per half; backward: the gradient's all-gather, the input's
    # again for the weight gradient and the data-gradient reduce-scatter, blocking (NCCL) or overlapped
    assert moved(overlapped, "all_gather") + moved(overlapped, "reduce_scatter") == pytest.approx(
        moved(blocking, "all_gather") + moved(blocking, "reduce_scatter"))
    # ring exchanges on the copy engine; the input's bulk all-gather on qkv_dgrad / fc1_dgrad's SMs
    assert {round(t.sm_share * DGX.gpu_spec.sms) for t in overlapped if t.plan.op == "all_gather"} == {0, 16}
    assert {round(t.sm_share * DGX.gpu_spec.sms) for t in overlapped if t.plan.op == "reduce_scatter"} >= {24, 32}


def test_more_chunks_expose_less_of_the_reduce_scatter():
    # the last chunk's reduce-scatter is exposed: 1/num_splits of the bytes
    exposed = {n: min(t.plan.size_bytes for t in tp_calls(program(TpOverlapSpec(num_splits=n)))
                      if t.plan.op == "reduce_scatter") for n in (2, 4)}
    assert exposed[4] == pytest.approx(exposed[2] / 2)


def test_overlap_needs_sequence_parallelism():
    with pytest.raises(InputError, match="sequence_parallel"):
        validate(ParallelSpec, {"tp": 4, "tp_comm_overlap": True})
    assert validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": True}).tp_comm_overlap \
        == validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": {}}).tp_comm_overlap


def test_overlap_in_torchs_batch_first_layout_is_refused_not_ignored():
    # Transformer Engine's userbuffers overlap Megatron's (s, b, h) collectives; torch DTensor's
    # (b, s, h) plans (sequence_parallel_layout: batch-first) have no such overlap to model
    with pytest.raises(InputError, match="batch-first"):
        validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "sequence_parallel_layout": "batch-first",
                                "tp_comm_overlap": True})
    assert validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "sequence_parallel_layout": "batch-first",
                                   "tp_comm_overlap": False}).tp_comm_overlap is False


def test_an_nccl_cta_limit_on_tp_leaves_the_userbuffers_transfers_alone():
    # userbuffers move the overlapped collectives themselves (copy engine or their own SMs), not
    # through an NCCL communicator, so parallel.nccl_max_ctas' tp limit does not cap them
    def caps(ctas):
        return sorted(f.rate_cap_bytes_per_s for t in tp_calls(program(TpOverlapSpec(), ctas=ctas))
                      for p in t.plan.phases for f in p.flows)
    assert caps((("tp", 1),)) == caps(())
    assert any(c < float("inf") for t in tp_calls(program(None, ctas=(("tp", 1),)))
               for p in t.plan.phases for c in (f.rate_cap_bytes_per_s for f in p.flows))


def test_sm_margin_runs_every_gemm_chunk_on_the_sms_the_reduce_scatter_leaves():
    # TE's set_sm_margin: the pipelined last GEMM's chunks all run on sm_count - num_sm SMs, the first
    # chunk (before any reduce-scatter) too; the reduce-scatter then takes no SMs from a running GEMM
    spec = TpOverlapSpec(proj_fprop_sms=24, fc2_fprop_sms=24)
    plain, margin = program(spec), program(TpOverlapSpec(proj_fprop_sms=24, fc2_fprop_sms=24, sm_margin=True))
    chunk_time = lambda prog: sum(t.duration_s for t in prog.tasks[0] if isinstance(t, ComputeTask)   # noqa: E731
                                  and ("chunk 1" in t.name or "chunks 2..n" in t.name))
    assert chunk_time(margin) > chunk_time(plain)
    # no more than the SMs left would allow: 132 / (132 - 24) times as long at most
    sms = DGX.gpu_spec.sms
    assert chunk_time(margin) <= chunk_time(plain) * sms / (sms - 24) * 1.001
    holding = lambda prog: [t for t in tp_calls(prog) if t.plan.op == "reduce_scatter"       # noqa: E731
                            and round(t.sm_share * sms) == 24]
    assert holding(plain) and not holding(margin)
    assert simulate(margin).end_s > simulate(plain).end_s
    assert validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": {"sm_margin": True}}) \
        .tp_comm_overlap.sm_margin


def _chunk_penalties(precision: str):
    """Per half of MODEL's block: the seconds the ring exchange's tp chunks of its first GEMM piece add to
    that piece's forward, and the forward GEMMs of the piece."""
    from scalesim.parallel.builder import StepBuilder
    from scalesim.parallel.tp_overlap import _chunked, _pieces
    plan = ParallelPlan(Placement(tp=4, cp=1, dp=1, pp=1), 1, 1, precision, "adamw", "none", "flash",
                        sp_backward="split", sequence_parallel=True, tp_overlap=TpOverlapSpec())
    b = StepBuilder(MODEL, DGX.gpu_spec, DGX, plan)
    work = next(w for w in b.chunk_work[0] if w.is_block)
    out = []
    for half in work.halves:
        piece = _pieces(b, half)[1]
        whole = b._layer_time(piece).forward_s
        out.append((whole * (_chunked(b, piece, "m", 4) - 1), [op for op in piece.ops if op.gemm_mnk]))
    return out


def test_a_chunked_gemm_casts_its_fp8_input_once():
    # TE quantizes the input once, then runs the userbuffers pipeline's chunks (module/linear.py @40c69e75
    # 194/227 then general_gemm(ub=...) at 309): chunking adds GEMM launches and tile waves, not casts
    from dataclasses import replace as with_
    from scalesim.costs.compute import op_time_s
    gpu = DGX.gpu_spec
    for penalty, gemms in _chunk_penalties("fp8"):
        first = gemms[0]
        m, n, k = first.gemm_mnk
        n = sum(op.gemm_mnk[1] for op in gemms)          # a gated fc1 is one GEMM of both projections
        one = with_(first, gemm_mnk=(m, n, k), flop=sum(op.flop for op in gemms), cast_share=0.0)
        part = with_(one, gemm_mnk=(m // 4, n, k), flop=one.flop / 4)
        expected = 4 * op_time_s(part, gpu, "fp8", 1) - sum(op_time_s(with_(op, cast_share=0.0), gpu, "fp8", 1)
                                                            for op in gemms)
        assert penalty == pytest.approx(expected, rel=0.02, abs=1e-7)


def test_a_gated_fc1_is_chunked_as_one_gemm():
    # Megatron-Core's linear_fc1 under gated_linear_unit is one GEMM of 2 x ffn columns (mlp.py @core_v0.14.0
    # 94-97): its row chunks fill the GPU's tiles as that wide GEMM does, not as two half-width ones
    from dataclasses import replace as with_
    from scalesim.costs.compute import op_time_s
    gpu = DGX.gpu_spec
    (_, _), (penalty, gemms) = _chunk_penalties("bf16")
    gate, up = gemms
    m, n, k = gate.gemm_mnk
    separate = sum(4 * op_time_s(with_(op, gemm_mnk=(m // 4, n, k), flop=op.flop / 4), gpu, "bf16", 1)
                   - op_time_s(op, gpu, "bf16", 1) for op in (gate, up))
    fused = with_(gate, gemm_mnk=(m, 2 * n, k), flop=2 * gate.flop)
    joined = 4 * op_time_s(with_(fused, gemm_mnk=(m // 4, 2 * n, k), flop=fused.flop / 4), gpu, "bf16", 1) \
        - 2 * op_time_s(gate, gpu, "bf16", 1)
    assert penalty == pytest.approx(joined, rel=0.02, abs=1e-7)
    assert joined < separate
