"""NCCL's memory traffic taken from overlapped compute (parallel/hbm_contention.py, NVIDIA/nccl#1428):
a memory-bound kernel beside an all-gather runs slower than alone, a GEMM at its compute bound does not,
more traffic never speeds compute up, and compute no call overlaps is untouched."""

from dataclasses import replace

import pytest

from scalesim.collectives import plan_collective
from scalesim.collectives.kernels import nccl_blocks, sm_share
from scalesim.costs.compute import op_time_s
from scalesim.engine.simulator import played as play
from scalesim.models import get_model
from scalesim.models.spec import OpSpec
from scalesim.parallel import ParallelPlan, Placement, build_program, hbm_contention
from scalesim.parallel.hbm_contention import contended, held_shares, share_traffic
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-a100"))
A100 = DGX.gpu_spec
ADD = OpSpec("add", "elementwise", 0.0, 3.0 * 2**26)
NORM = OpSpec("norm", "norm", 8.0 * 2**24, 2.0 * 2**24)
BIG_GEMM = OpSpec("g", "gemm", 2.0 * 8192**3, 0.0, (8192, 8192, 8192))
THIN_GEMM = OpSpec("thin", "gemm", 2.0 * 8 * 8192 * 8192, 0.0, (8, 8192, 8192))


def gather_traffic(size=256 * 2**20):
    """HBM bytes/s an 8-GPU NVLink all-gather moves on each member, its SM share and its blocks."""
    plan = plan_collective("all_gather", DGX, tuple(range(8)), size)
    share = sm_share(plan, DGX, A100.sms)
    task = CollectiveTask("gather", "g/0", plan, sm_share=share)
    return share_traffic({0: (task,)}, DGX.capacity_bytes_per_s)[share][0], nccl_blocks(plan, DGX)


def test_a_memory_bound_kernel_beside_an_all_gather_is_slower_than_alone_and_a_big_gemm_is_not():
    traffic, blocks = gather_traffic()
    assert traffic > 0
    busy = contended(A100, traffic)
    # A GEMM bound by its weights' bytes (8 tokens) and an elementwise kernel where the DRAM, not the
    # SMs' issue rate, bounds it (no SM clock: costs/compute.py streaming_bw_bytes_per_s) lose bandwidth.
    assert op_time_s(THIN_GEMM, busy, "bf16", 1, held_sms=blocks) > op_time_s(THIN_GEMM, A100, "bf16", 1,
                                                                              held_sms=blocks)
    dram_bound = replace(A100, sm_clock_hz=0.0)
    assert (op_time_s(ADD, contended(dram_bound, traffic), "bf16", 1, held_sms=blocks)
            > op_time_s(ADD, dram_bound, "bf16", 1, held_sms=blocks))
    assert op_time_s(BIG_GEMM, busy, "bf16", 1, held_sms=blocks) == op_time_s(BIG_GEMM, A100, "bf16", 1,
                                                                            held_sms=blocks)


@pytest.mark.parametrize("op", [ADD, NORM, BIG_GEMM, THIN_GEMM])
@pytest.mark.parametrize("gpu", [A100, replace(A100, sm_clock_hz=0.0)])
def test_more_nccl_traffic_never_speeds_compute(op, gpu):
    traffic, blocks = gather_traffic()
    times = [op_time_s(op, contended(gpu, t), "bf16", 4, held_sms=blocks)
             for t in (0.0, traffic / 4, traffic / 2, traffic, 2 * traffic, 8 * traffic)]
    assert all(a <= b for a, b in zip(times, times[1:]))


def test_two_calls_on_the_same_links_split_one_bandwidth_and_on_separate_links_add():
    traffic = {0.1: (100.0, frozenset({1, 2})), 0.2: (300.0, frozenset({2, 3})), 0.3: (50.0, frozenset({9}))}
    shares = dict(held_shares(traffic))
    assert shares[0.1] == 100.0 and shares[0.2] == 300.0
    assert shares[0.1 + 0.2] == 300.0            # share a link: the busier one's
    assert shares[0.2 + 0.3] == 350.0            # separate links: both


MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000},
                  seq_len=1024)
ZERO3 = ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), 1, 2, "bf16", "adamw", "none", "flash", zero=3)


def played(monkeypatch, bytes_per_bus_byte):
    monkeypatch.setattr(hbm_contention, "HBM_BYTES_PER_BUS_BYTE", bytes_per_bus_byte)
    program = build_program(MODEL, replace(A100, sm_clock_hz=0.0), DGX, ZERO3)     # DRAM-bound kernels
    return program, play(program)


def test_overlapped_compute_slows_and_compute_no_call_overlaps_is_unchanged(monkeypatch):
    quiet_program, quiet = played(monkeypatch, 0.0)
    program, busy = played(monkeypatch, 3.0)
    # Every held factor at least the SM share's alone, some larger (the memory-bound kernels').
    pairs = [(a, b) for ra, rb in zip(program.held_factors, quiet_program.held_factors) for a, b in zip(ra, rb)]
    assert all(a[0] == b[0] and a[1] >= b[1] for a, b in pairs)
    assert any(a[1] > b[1] for a, b in pairs)
    end = lambda run: max(iv.end_s for iv in run[0])  # noqa: E731
    assert end(busy) > end(quiet)
    tasks = program.tasks[0]
    mine = [(iv, tasks[i]) for iv, i in zip(busy[0], busy[1]) if iv.rank == 0]
    calls = [(iv.start_s, iv.end_s) for iv, t in mine if isinstance(t, CollectiveTask) and t.sm_share > 0]
    alone = [(iv, t) for iv, t in mine if isinstance(t, ComputeTask) and t.duration_s > 0
             and not any(s < iv.end_s and iv.start_s < e for s, e in calls)]
    assert alone
    for iv, t in alone:
        assert iv.end_s - iv.start_s == pytest.approx(t.duration_s, rel=1e-9)
