"""Sequence parallelism on (batch, seq, hidden) activations (torch DTensor, torchtitan): every all-gather
and reduce-scatter carries a copy of the whole tensor on the compute stream (parallel/sp_layout.py)."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import ComputeTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 1000,
                   "ffn": "swiglu", "ffn_hidden": 2816}, seq_len=1024)
BLOCKS = sum(1 for layer in MODEL.layers if layer.kind == "transformer_block")
NAME = "sequence-parallel layout copy"


def program(layout: str, sp: bool = True, checkpointing: str = "none", precision: str = "bf16"):
    plan = ParallelPlan(Placement(tp=4, cp=1, dp=1, pp=1), 2, 1, precision, "adamw", checkpointing, "flash", sp_backward="split",
                        sequence_parallel=sp, sequence_parallel_layout=layout)
    return build_program(MODEL, DGX.gpu_spec, DGX, plan)


def copies(prog) -> list[ComputeTask]:
    return [t for t in prog.tasks[0] if isinstance(t, ComputeTask) and t.name == NAME]


def test_one_copy_per_sequence_parallel_collective():
    # forward: an all-gather before and a reduce-scatter after each half; backward: the mirrored pair
    assert len(copies(program("batch-first"))) == BLOCKS * (4 + 4)
    # torchtitan's per-op policy gathers both halves' inputs again to recompute wk and w3
    assert len(copies(program("batch-first", checkpointing="selective-op"))) == BLOCKS * (4 + 4 + 2)
    assert copies(program("seq-first")) == [] and copies(program("batch-first", sp=False)) == []


def test_copies_sit_on_the_critical_path_of_a_tensor_parallel_step():
    slow = program("batch-first")
    fast = replace(slow, tasks={r: tuple(replace(t, duration_s=0.0) if t in copies(slow) else t for t in ts)
                                for r, ts in slow.tasks.items()})
    added = simulate(slow).end_s - simulate(fast).end_s
    assert added == pytest.approx(sum(t.duration_s for t in copies(slow)), rel=0.02)


def test_fp8_block_input_is_gathered_and_copied_after_its_cast():
    tasks = copies(program("batch-first", precision="fp8"))
    by_kind = {}
    for t in tasks:
        by_kind.setdefault(t.kind, set()).add(round(t.duration_s - KERNEL_OVERHEAD_S, 15))
    forward = sorted(by_kind["forward"])
    assert len(forward) == 2 and forward[1] == pytest.approx(2 * forward[0])    # 1-byte input, 2-byte output
    # backward's pair: the output gradient gathered in float8 after its cast (torchao Float8RowwiseParallel),
    # the input gradient scattered at 16 bits: 3/4 of the 16-bit bytes
    assert len(by_kind["backward"]) == 1 and min(by_kind["backward"]) == pytest.approx(0.75 * forward[1])


def test_fp8_block_input_all_gather_moves_half_the_bytes_of_the_reduce_scatter():
    from scalesim.program import CollectiveTask
    sizes = {}
    for t in program("batch-first", precision="fp8").tasks[0]:
        if isinstance(t, CollectiveTask) and t.name.startswith("tp "):
            sizes.setdefault(t.plan.op, set()).add(t.plan.size_bytes)
    assert len(sizes["all_gather"]) == 1 and len(sizes["reduce_scatter"]) == 1
    assert 2 * min(sizes["all_gather"]) == min(sizes["reduce_scatter"])
    # seq-first (Megatron's layout, Transformer Engine) keeps its forward all-gather at 16 bits; only the
    # input gathered again in backward is the FP8 copy (parallel/sp_backward.py)
    same = [t.plan.size_bytes for t in program("seq-first", precision="fp8").tasks[0]
            if isinstance(t, CollectiveTask) and t.name.startswith("tp ")]
    assert sorted(set(same)) == [max(same) / 2, max(same)] and same.count(max(same) / 2) == 2 * BLOCKS
