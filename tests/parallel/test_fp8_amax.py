"""Transformer Engine's delayed scaling (parallel/fp8_amax.py): an amax all-reduce over the stage's tensor x data x
context parallel ranks after every model chunk's forward and backward, which the compute stream waits for."""

import pytest

from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.topology import Fabric, build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8, "rail-optimized"))
MODEL = get_model({"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 8, "vocab": 32000, "ffn": "swiglu",
                   "ffn_hidden": 2816, "kv_heads": 8}, seq_len=2048)

def plan(delayed=True, precision="fp8", virtual=2):
    return ParallelPlan(Placement(tp=2, cp=1, dp=4, pp=2), 1, 4, precision, "adamw", "none", "flash", zero=1,
                        schedule="interleaved", virtual_stages=virtual, fp8_delayed_scaling=delayed)

def amax_tasks(p, rank=0):
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, p).tasks[rank]
    return tasks, [t for t in tasks if t.name.startswith("fp8_amax_")]

@pytest.mark.parametrize("virtual", [1, 2])
def test_every_chunk_pass_reduces_its_amaxes_over_the_stage(virtual):
    tasks, reduces = amax_tasks(plan(virtual=virtual))
    # once per micro-batch, local chunk and pass (forward on leaving the autocast, backward at its first module)
    assert len(reduces) == 2 * 4 * virtual
    stage = {r for r in range(16) if r // 8 == 0}          # pp outermost: ranks 0-7 are stage 0 (tp x dp)
    for t in reduces:
        assert set(t.plan.ranks) == stage
    # the next compute waits for the reduction (through the scale update kernel)
    updates = [i for i, t in enumerate(tasks) if t.name.startswith("fp8 amax update")]
    assert len(updates) == len(reduces)
    assert all(any(tasks.index(r) in tasks[u].deps for r in reduces) for u in updates)

def test_no_reduction_in_16_bits_or_without_delayed_scaling_and_never_a_shorter_step():
    assert amax_tasks(plan(precision="bf16"))[1] == [] and amax_tasks(plan(delayed=False))[1] == []
    ends = [simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(delayed=d))).end_s for d in (False, True)]
    assert ends[1] > ends[0]

@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_each_reduction_carries_the_amaxes_of_every_chunk_the_rank_holds(kind):
    # TE keeps one amax buffer per recipe and group, which every chunk's modules join: however the stage's
    # layers are split into virtual chunks, each reduction carries all of them (on main: half with two chunks)
    sizes = [{t.plan.size_bytes for t in amax_tasks(plan(virtual=v))[1] if t.name.startswith("fp8_amax_" + kind)}
             for v in (1, 2)]
    assert len(sizes[0]) == len(sizes[1]) == 1 and sizes[0] == sizes[1]
