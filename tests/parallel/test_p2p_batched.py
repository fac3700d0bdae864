"""Megatron's batched, synchronized pipeline exchanges (parallel/p2p_batched.py, overlap_p2p_comm: false)."""

import pytest

from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program, p2p_batched
from scalesim.parallel.schedules import interleaved, one_f_one_b
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-a100"))
MODEL = get_model({"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000}, seq_len=512)
SHAPES = [(4, 8, 2), (4, 12, 2), (2, 4, 4), (4, 4, 2), (4, 8, 1), (3, 2, 1), (8, 16, 1)]


@pytest.mark.parametrize("stages,micro_batches,chunks", SHAPES)
def test_passes_run_in_megatrons_schedule_order(stages, micro_batches, chunks):
    for stage in range(stages):
        passes = [e for e in p2p_batched.events(stage, stages, micro_batches, chunks) if e[0] != "X"]
        expected = (interleaved(stage, stages, micro_batches, chunks) if chunks > 1
                    else one_f_one_b(stage, stages, micro_batches))
        assert passes == expected


@pytest.mark.parametrize("stages,micro_batches,chunks", SHAPES)
def test_every_tensor_sent_is_received_once_in_the_order_sent(stages, micro_batches, chunks):
    """NCCL P2P pairs a send with the receive its peer posts: both sides must name the same tensors in
    the same order, or the schedule deadlocks."""
    sent, received = {}, {}
    for stage in range(stages):
        for event in p2p_batched.events(stage, stages, micro_batches, chunks):
            if event[0] != "X":
                continue
            for direction, mb, c in event[1]:
                g = c * stages + stage
                to = g + 1 if direction == "act" else g - 1
                sent.setdefault((stage, to % stages, direction), []).append((mb, to))
            for direction, mb, c in event[2]:
                g = c * stages + stage
                source = g - 1 if direction == "act" else g + 1
                received.setdefault((source % stages, stage, direction), []).append((mb, g))
    assert sent == received
    # every forward but the model's last chunk sends its activation, every backward but the first its gradient
    assert sum(map(len, sent.values())) == 2 * micro_batches * (stages * chunks - 1)


def plan(overlap, chunks=2, tp=1, scatter_gather=False):
    return ParallelPlan(Placement(tp=tp, cp=1, dp=1, pp=4), 1, 8, "bf16", "adamw", "full", "flash",
                        schedule="interleaved" if chunks > 1 else "1f1b", virtual_stages=chunks,
                        overlap_p2p_comm=overlap, pp_scatter_gather=scatter_gather, host_dispatch_s=10e-6)


@pytest.mark.parametrize("chunks", [1, 2])
def test_the_gpu_computes_nothing_while_an_exchange_is_in_flight(chunks):
    """The exchange waits for the compute queued before it, and the host launches nothing more until it
    has ended (torch.cuda.synchronize): no compute overlaps a transfer of its own rank."""
    timeline = simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(False, chunks)))
    for rank in {iv.rank for iv in timeline.intervals}:
        transfers = [iv for iv in timeline.intervals if iv.rank == rank and iv.stream.startswith("pp_")]
        computes = [iv for iv in timeline.intervals if iv.rank == rank and iv.stream == "compute"
                    and iv.end_s > iv.start_s]
        assert transfers and computes
        for t in transfers:
            assert not any(c.start_s < t.end_s - 1e-12 and t.start_s < c.end_s - 1e-12 for c in computes)
    overlapped = simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(True, chunks)))
    assert timeline.end_s > overlapped.end_s


def test_scatter_gather_sends_a_tensor_parallel_share_and_gathers_it_after():
    def tasks(scatter_gather):
        program = build_program(MODEL, DGX.gpu_spec, DGX, plan(False, tp=2, scatter_gather=scatter_gather))
        return [t for t in program.tasks[0] + program.tasks[2] if isinstance(t, CollectiveTask)]

    whole, shared = tasks(False), tasks(True)
    sizes = {t.plan.size_bytes for t in whole if t.stream.startswith("pp_")}
    assert {t.plan.size_bytes for t in shared if t.stream.startswith("pp_")} == {s / 2 for s in sizes}
    receives = [t for t in shared if t.stream.startswith("pp_recv")]
    gathers = [t for t in shared if t.key.startswith("pp_gather/")]
    assert receives and len(gathers) == len(receives)
    assert all(t.plan.op == "all_gather" and t.plan.size_bytes == 2 * max(sizes) / 2 for t in gathers)
    assert not any(t.key.startswith("pp_gather/") for t in whole)


def test_scatter_gather_without_batched_exchanges_is_refused(tmp_path):
    from pathlib import Path

    from scalesim.app.setup import prepare
    from scalesim.errors import InputError
    from scalesim.scenario import load_scenario

    source = Path(__file__).parents[2] / "validation/scenarios/megatron-sc21-gpt-76.1B.yaml"
    path = tmp_path / "s.yaml"
    path.write_text(source.read_text().replace("overlap_p2p_comm: false", "overlap_p2p_comm: true"))
    with pytest.raises(InputError) as error:
        prepare(*load_scenario(path))
    assert error.value.key == "parallel.pp_scatter_gather"


@pytest.mark.parametrize("chunks", [1, 2])
def test_one_rank_per_stage_times_the_exchanges_as_every_rank(chunks):
    from scalesim.topology import Fabric

    two = build_cluster(load_node_design("dgx-a100"), nodes=2, fabric=Fabric("ib-hdr", 8, "fat-tree"))
    p = ParallelPlan(Placement(tp=2, cp=1, dp=2, pp=4), 1, 8, "fp16", "adamw", "full", "fused",
                     schedule="interleaved" if chunks > 1 else "1f1b", virtual_stages=chunks,
                     overlap_p2p_comm=False, pp_scatter_gather=True, host_dispatch_s=10e-6)
    symmetric = simulate(build_program(MODEL, two.gpu_spec, two, p)).end_s
    assert symmetric == pytest.approx(simulate(build_program(MODEL, two.gpu_spec, two, p, symmetric=False)).end_s)
