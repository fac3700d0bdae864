"""Two per-step costs outside the layers: the tied embeddings' gradient summed across pipeline
stages, and micro-batch gradients accumulated into fp32 buffers as a pass of their own."""

import pytest

from scalesim.costs.accumulation import grad_accumulation_bytes_per_param
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
SMALL = {"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 8, "vocab": 32000}


def plan(pp=2, m=4, accumulation="fused"):
    return ParallelPlan(Placement(tp=1, cp=1, dp=1, pp=pp), 1, m, "bf16", "adamw", "none", "flash",
                        grad_accumulation=accumulation)


def program(tied: bool, p):
    model = get_model({**SMALL, "tied_embeddings": tied}, seq_len=1024)
    return build_program(model, DGX.gpu_spec, DGX, p)


def tied_calls(prog):
    return [t for tasks in prog.tasks.values() for t in tasks if isinstance(t, CollectiveTask) and t.name.startswith("tied")]


def test_tied_embeddings_split_over_stages_sum_their_gradient_once_per_step():
    calls = tied_calls(program(True, plan(pp=2)))
    # one all-reduce between the first and the last stage, seen from each of the two ranks
    assert len(calls) == 2 and all(c.plan.op == "all_reduce" and len(c.plan.ranks) == 2 for c in calls)
    assert calls[0].plan.size_bytes == pytest.approx(SMALL["vocab"] * SMALL["hidden"] * 2)


def test_no_sum_without_tying_or_without_a_pipeline():
    assert not tied_calls(program(False, plan(pp=2)))
    assert not tied_calls(program(True, plan(pp=1)))


def test_fp32_accumulation_reads_the_16_bit_gradient_and_reads_and_writes_fp32():
    assert grad_accumulation_bytes_per_param("fp32-add", "bf16") == 2 + 4 + 4
    assert grad_accumulation_bytes_per_param("fused", "bf16") == 0


@pytest.mark.parametrize("m", [2, 8])
def test_a_separate_accumulation_pass_costs_more_with_more_micro_batches(m):
    fused = simulate(program(False, plan(pp=1, m=m))).end_s
    added = simulate(program(False, plan(pp=1, m=m, accumulation="fp32-add"))).end_s
    assert added > fused
    if m == 8:
        two = (simulate(program(False, plan(pp=1, m=2, accumulation="fp32-add"))).end_s
               - simulate(program(False, plan(pp=1, m=2))).end_s)
        assert added - fused == pytest.approx(4 * two, rel=0.05)


@pytest.mark.parametrize("pp,m", [(1, 4), (2, 6)])
def test_autograd_adds_every_micro_batch_but_the_first(pp, m):
    """zero_grad sets param.grad to None: autograd takes the first micro-batch's gradient as is and adds
    each later one in place, reading both and writing one 16-bit tensor."""
    def passes(mode):
        prog = program(False, plan(pp, m, mode))
        return [t for tasks in prog.tasks.values() for t in tasks if t.name == "gradient accumulation"]

    assert len(passes("autograd-add")) == pp * (m - 1) and len(passes("fp32-add")) == pp * m
    assert grad_accumulation_bytes_per_param("autograd-add", "fp16") == 3 * 2
    fused = simulate(program(False, plan(pp, m))).end_s
    assert simulate(program(False, plan(pp, m, "autograd-add"))).end_s > fused
