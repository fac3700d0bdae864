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
