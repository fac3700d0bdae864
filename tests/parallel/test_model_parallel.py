"""Tensor, pipeline and context parallelism and ZeRO: the published formulas, played out."""

from dataclasses import replace

import pytest

from scalesim.collectives import bus_factor
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.parallel.schedules import gpipe, in_flight, interleaved, one_f_one_b
from scalesim.parallel.stages import model_chunks, split_blocks
from scalesim.program import CollectiveTask
from scalesim.result import breakdown, critical_rank
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
# Many equal blocks and a tiny vocabulary: the pipeline is uniform up to ~1%.
UNIFORM = {"kind": "transformer", "layers": 32, "hidden": 2048, "heads": 16, "vocab": 128}


def plan(tp=1, cp=1, dp=1, pp=1, m=8, zero=0, schedule="1f1b", v=1, sp=False, mb=1):
    return ParallelPlan(Placement(tp=tp, cp=cp, dp=dp, pp=pp), mb, m, "bf16", "adamw", "none", "flash",
                        zero=zero, sequence_parallel=sp, schedule=schedule, virtual_stages=v)


def step(model, p):
    timeline = simulate(build_program(model, DGX.gpu_spec, DGX, p))
    return timeline, breakdown(timeline.for_rank(critical_rank(timeline)), timeline.end_s)


@pytest.mark.parametrize("pp,m", [(4, 8), (2, 16), (8, 8)])
def test_1f1b_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(pp, m):
    model = get_model(UNIFORM, seq_len=2048)
    timeline, parts = step(model, plan(pp=pp, m=m))
    assert parts.bubble / timeline.end_s == pytest.approx((pp - 1) / (m + pp - 1), rel=0.05)


def test_gpipe_has_the_same_bubble_but_holds_every_micro_batch():
    model = get_model(UNIFORM, seq_len=2048)
    one, _ = step(model, plan(pp=4, m=8))
    g, _ = step(model, plan(pp=4, m=8, schedule="gpipe"))
    assert g.end_s == pytest.approx(one.end_s, rel=0.02)
    assert in_flight(gpipe(0, 4, 8)) == 8 and in_flight(one_f_one_b(0, 4, 8)) == 4


def test_interleaving_shrinks_the_bubble_by_about_the_virtual_stage_count():
    model = get_model(UNIFORM, seq_len=2048)
    _, plain = step(model, plan(pp=4, m=8))
    t, inter = step(model, plan(pp=4, m=8, schedule="interleaved", v=2))
    assert inter.bubble == pytest.approx(plain.bubble / 2, rel=0.15)


def test_every_micro_batch_goes_forward_and_back_through_every_chunk_once():
    for stage in range(4):
        order = interleaved(stage, 4, 8, 2)
        assert sorted(order) == sorted([(k, m, c) for k in "FB" for m in range(8) for c in range(2)])


def test_uneven_layers_leave_the_embedding_and_head_stages_lighter():
    assert split_blocks(126, 16) == [7] + [8] * 14 + [7]
    assert sum(split_blocks(30, 4)) == 30 and max(split_blocks(30, 4)) - min(split_blocks(30, 4)) <= 1
    chunks = model_chunks(get_model("gpt2-124m", seq_len=1024), 4)
    assert chunks[0][0].kind == "embedding" and chunks[-1][-1].kind == "head"


def bus_bytes(program, rank, prefix):
    total = 0.0
    for t in program.tasks[rank]:
        if isinstance(t, CollectiveTask) and t.key.startswith(prefix):
            total += t.plan.size_bytes * bus_factor(t.plan.op, len(t.plan.ranks))
    return total


def test_zero3_moves_one_and_a_half_times_the_data_of_ddp():
    model = get_model("gpt2-124m", seq_len=1024)
    ddp = build_program(model, DGX.gpu_spec, DGX, plan(dp=8, m=1))
    fsdp = build_program(model, DGX.gpu_spec, DGX, plan(dp=8, m=1, zero=3))
    assert bus_bytes(fsdp, 0, "") == pytest.approx(1.5 * bus_bytes(ddp, 0, ""), rel=1e-6)


def test_zero1_moves_the_same_data_as_ddp():
    model = get_model("gpt2-124m", seq_len=1024)
    ddp = build_program(model, DGX.gpu_spec, DGX, plan(dp=8, m=1))
    zero1 = build_program(model, DGX.gpu_spec, DGX, plan(dp=8, m=1, zero=1))
    assert bus_bytes(zero1, 0, "") == pytest.approx(bus_bytes(ddp, 0, ""), rel=1e-6)


@pytest.mark.parametrize("m", [1, 4])
def test_overlapped_param_gather_moves_the_same_bytes_once_per_step_and_hides_behind_forward(m):
    from dataclasses import replace

    model = get_model("gpt2-350m", seq_len=1024)
    after_step = plan(dp=8, m=m, zero=1)
    overlapped = replace(after_step, overlap_param_gather=True)
    a = build_program(model, DGX.gpu_spec, DGX, after_step)
    b = build_program(model, DGX.gpu_spec, DGX, overlapped)
    # The same parameters gathered once per step (not per micro-batch), layer by layer.
    assert bus_bytes(b, 0, "zero") == pytest.approx(bus_bytes(a, 0, "zero"), rel=1e-6)
    assert bus_bytes(b, 0, "") == pytest.approx(bus_bytes(a, 0, ""), rel=1e-6)
    (ta, pa), (tb, pb) = step(model, after_step), step(model, overlapped)
    assert tb.end_s <= ta.end_s and pb.exposed_comm < pa.exposed_comm


@pytest.mark.parametrize("sp, backward", [(False, "fused"), (True, "fused"), (True, "split")])
def test_tensor_parallel_traffic_per_block_matches_megatron(sp, backward):
    # Megatron (Shoeybi et al. 2019): 2 all-reduces of b*s*h in forward and 2 in backward per block;
    # with sequence parallelism each all-reduce becomes an all-gather plus a reduce-scatter, and backward
    # gathers each half's input again for its weight gradient (Korthikanti et al. 2022, section 4.2.2),
    # which sequence_parallel_backward: split simulates (fused times the backward as the all-reduces).
    model = get_model("gpt2-350m", seq_len=1024)
    tp, m, mb = 4, 2, 2
    p = build_program(model, DGX.gpu_spec, DGX, replace(plan(tp=tp, dp=2, m=m, mb=mb, sp=sp), sp_backward=backward))
    layer_bytes = mb * 1024 * model.hidden * 2
    per_block = (4 * 2 + (2 if backward == "split" else 0)) * (tp - 1) / tp * layer_bytes   # 4 all-reduces (+ 2 gathers)
    assert bus_bytes(p, 0, "tp/") == pytest.approx(per_block * model.num_layers * m, rel=1e-6)


def test_tensor_parallel_splits_compute():
    model = get_model("gpt2-774m", seq_len=1024)
    one, _ = step(model, plan(dp=1, m=2, mb=4))
    four, parts = step(model, plan(tp=4, m=2, mb=4))
    # Faster than one GPU, never by more than 4x, and the blocking all-reduces show as exposed comm.
    assert one.end_s / 4 < four.end_s < one.end_s
    assert parts.exposed_comm > 0


def test_context_parallel_splits_the_sequence_and_exchanges_keys_and_values():
    model = get_model("llama3-8b", seq_len=8192)
    p = build_program(model, DGX.gpu_spec, DGX, plan(cp=2, dp=1, m=1))
    assert bus_bytes(p, 0, "cp/") > 0
    long = get_model({**UNIFORM, "layers": 8}, seq_len=16384)
    one, _ = step(long, plan(m=1))
    two, _ = step(long, plan(cp=2, m=1))
    assert two.end_s < one.end_s


def test_context_parallel_exchanges_only_the_tensor_parallel_ranks_own_key_value_heads():
    # Megatron splits the attention heads over the TP ranks, and Transformer Engine's context-parallel
    # attention runs inside each TP rank on its own heads: at tp 2 each rank passes half the K and V.
    model = get_model("llama3-8b", seq_len=8192)
    alone = build_program(model, DGX.gpu_spec, DGX, plan(cp=2, dp=1, m=1))
    split = build_program(model, DGX.gpu_spec, DGX, plan(tp=2, cp=2, dp=1, m=1, sp=True))
    assert bus_bytes(split, 0, "cp/") == pytest.approx(bus_bytes(alone, 0, "cp/") / 2, rel=1e-9)


@pytest.mark.parametrize("layout", [dict(dp=16), dict(tp=2, dp=4, pp=2), dict(cp=2, dp=4, pp=2), dict(tp=4, dp=2, pp=2)])
@pytest.mark.parametrize("zero", [0, 3])
def test_simulating_one_rank_per_stage_agrees_with_simulating_every_rank(layout, zero):
    from scalesim.topology import Fabric
    # Two nodes with half as many NICs as GPUs: symmetric copies of a group share NICs.
    cluster = build_cluster(load_node_design("dgx-a100"), nodes=2, fabric=Fabric("ib-hdr", 4, "rail-optimized"))
    model = get_model("gpt2-124m", seq_len=1024)
    p = plan(m=4, mb=2, zero=zero, **layout)
    full = simulate(build_program(model, cluster.gpu_spec, cluster, p, symmetric=False))
    reduced = simulate(build_program(model, cluster.gpu_spec, cluster, p, symmetric=True))
    assert len({iv.rank for iv in reduced.intervals}) == p.placement.pp
    assert reduced.end_s == pytest.approx(full.end_s, rel=0.01)


def test_placement_order_decides_which_ranks_share_a_node():
    from scalesim.parallel.placement import Placement
    megatron = Placement(tp=2, cp=1, dp=2, pp=2)
    assert megatron.group("tp", megatron.coords(0)) == (0, 1)          # TP peers adjacent
    pp_inner = Placement(tp=2, cp=1, dp=2, pp=2, order=("pp", "tp", "cp", "dp"))
    assert pp_inner.group("pp", pp_inner.coords(0)) == (0, 1)          # now pipeline peers are
    assert sorted(r for c in range(1) for r in range(8)) == sorted(pp_inner.rank(**pp_inner.coords(r)) for r in range(8))


def test_one_rank_per_stage_agrees_with_every_rank_when_copies_share_an_oversubscribed_spine(monkeypatch):
    from scalesim.topology import Fabric
    import scalesim.topology.cluster as cluster_module
    # Leaves of 4 NICs: nodes 0-1 on one leaf, 2-3 on the other; pipeline sends between
    # them share each leaf's uplink (half the NICs' bandwidth) with their symmetric copies.
    monkeypatch.setattr(cluster_module, "LEAF_DOWNLINKS", 4)
    cluster = build_cluster(load_node_design("dgx-a100"), nodes=4,
                            fabric=Fabric("ib-hdr", 2, "fat-tree", oversubscription=2.0))
    model = get_model("gpt2-124m", seq_len=1024)
    p = plan(tp=2, pp=2, dp=8, m=4, mb=2)
    full = simulate(build_program(model, cluster.gpu_spec, cluster, p, symmetric=False))
    reduced = simulate(build_program(model, cluster.gpu_spec, cluster, p, symmetric=True))
    assert reduced.end_s == pytest.approx(full.end_s, rel=0.01)
