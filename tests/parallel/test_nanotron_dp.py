"""nanotron's data-parallel gradient path: DDP buckets of whole bf16 tensors reduced as fp32 by its
accumulation hook, one all-reduce per tensor without ZeRO, and the host work of its per-rank-slice
ZeRO-1 collectives (scalesim/costs/coalesced.py)."""

from dataclasses import replace

import pytest

from scalesim.costs.coalesced import (SLICE_OP_FRACTION, all_gather_copy_host_s, param_tensor_shares, param_tensors,
                                      reduce_scatter_hook_host_s)
from scalesim.costs.host import BACKWARD_DISPATCH_FRACTION
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.parallel.ddp import tensor_buckets
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
LLAMA = {"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000, "ffn": "swiglu",
         "ffn_hidden": 2816, "tied_embeddings": True}
MODEL = get_model(LLAMA, seq_len=1024)


DISPATCH_S = 13e-6        # scalesim/costs/host.py DISPATCH_S_PER_OP


def plan(dp=8, zero=0, nanotron=True, copies=True, **extra):
    return ParallelPlan(Placement(tp=1, cp=1, dp=dp, pp=1), 1, 2, "bf16", "adamw", "none", "flash", zero=zero,
                        grad_reduce_dtype="fp32", grad_accumulation="fp32-add" if nanotron else "fused",
                        zero1_over_ddp=nanotron and copies and zero == 1, host_dispatch_s=DISPATCH_S, **extra)


def rank0(p):
    return build_program(MODEL, DGX.gpu_spec, DGX, p).tasks[0]


def grad_calls(tasks):
    return [t for t in tasks if isinstance(t, CollectiveTask) and t.name.startswith("grad ")]


def test_whole_tensors_fill_buckets_and_every_byte_is_reduced_once():
    layers = [(3.0, 9.0, 1.0), (0.5,), (2.0, 2.0)]
    buckets = tensor_buckets(layers, bucket_bytes=4.0, first_bucket_bytes=1.0)
    assert sum(b[0] for b in buckets) == pytest.approx(sum(map(sum, layers)))
    assert sum(b[2] for b in buckets) == sum(map(len, layers))
    assert (9.0, 0, 1) in buckets                     # larger than the cap: a bucket of its own
    assert [b[1] for b in buckets] == sorted(b[1] for b in buckets)


def test_a_llama_block_holds_nanotrons_six_tensors_and_their_shares_add_up():
    block = next(layer for layer in MODEL.layers if layer.kind == "transformer_block")
    assert param_tensors(block) == 6                  # 2 norms, qkv, o, gate_up, down
    assert sum(param_tensor_shares(block)) == pytest.approx(1.0)
    assert param_tensors(next(layer for layer in MODEL.layers if layer.kind == "head")) == 0    # tied


def test_without_zero_the_hook_all_reduces_each_parameter_tensor_and_moves_every_fp32_gradient():
    calls = grad_calls(rank0(plan(zero=0)))
    assert all(c.plan.op == "all_reduce" for c in calls)
    assert len(calls) == sum(param_tensors(layer) for layer in MODEL.layers)
    assert sum(c.plan.size_bytes for c in calls) == pytest.approx(4 * MODEL.params, rel=1e-6)


def test_zero1_reduce_scatters_buckets_sized_by_their_bf16_gradients():
    calls = grad_calls(rank0(plan(zero=1, bucket_bytes=4 * 2**20)))
    assert sum(c.plan.size_bytes for c in calls) == pytest.approx(4 * MODEL.params, rel=1e-6)
    # a bucket closes once it holds 4 MiB of bf16 gradients: 8 MiB of fp32 reduced (but the first and last)
    assert max(c.plan.size_bytes for c in calls) >= 8 * 2**20
    assert len(calls) <= 4 * MODEL.params / (8 * 2**20) + 2 + MODEL.params * 2 / (32000 * 1024 * 2)


def test_zero1_copies_cost_host_time_that_grows_with_the_data_parallel_ranks():
    def copy_host_s(dp):
        return sum(t.host_s for t in rank0(plan(dp=dp, zero=1)) if isinstance(t, ComputeTask)
                   and t.name.startswith("zero-1 gathered"))
    assert copy_host_s(8) == pytest.approx(2 * copy_host_s(4)) and copy_host_s(4) > 0
    tensors = sum(map(param_tensors, MODEL.layers))
    assert copy_host_s(8) == pytest.approx(all_gather_copy_host_s(8, tensors, DISPATCH_S))
    # a Python copy_ per rank and tensor at least, each with autograd off: cheaper than a GEMM called from Python
    assert 8 * tensors * DISPATCH_S * SLICE_OP_FRACTION < copy_host_s(8) < 8 * tensors * DISPATCH_S


def test_a_slice_op_with_autograd_off_costs_less_than_a_full_python_dispatch_but_not_nothing():
    # no autograd record, no backend algorithm choice (costs/coalesced.py): a share of the dispatch chain
    assert 0.0 < SLICE_OP_FRACTION < 1.0
    assert reduce_scatter_hook_host_s(64, DISPATCH_S) < 64 * DISPATCH_S * (1 + BACKWARD_DISPATCH_FRACTION)


def test_the_slice_copies_never_make_a_step_faster():
    with_copies = simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(zero=1))).end_s
    without = simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(zero=1, copies=False))).end_s
    assert with_copies > without


def test_zero1_backward_after_a_bucket_waits_for_its_reduce_scatter():
    # one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1): the .then() copy's wait holds the compute stream
    tasks = rank0(plan(zero=1))
    calls = {i for i, t in enumerate(tasks) if isinstance(t, CollectiveTask) and t.name == "grad reduce_scatter"}
    copies = [t for t in tasks if isinstance(t, ComputeTask) and t.name == "reduce-scatter shard copied"]
    assert len(copies) == len(calls) and all(t.stream == "compute" and set(t.deps) <= calls for t in copies)


def test_without_ddp_nothing_is_reduced_in_backward_and_one_fp32_all_reduce_follows_the_last_backward():
    # accumulate_grad_in_fp32 at ZeRO-1: nanotron builds no DDP (trainer.py:797-799) and all-reduces the
    # contiguous fp32 buffer over dp after the pipeline (gradient_accumulator.py:155)
    tasks = rank0(plan(zero=1, copies=False))
    calls = grad_calls(tasks)
    assert [c.plan.op for c in calls] == ["all_reduce"]
    assert calls[0].plan.size_bytes == pytest.approx(4 * MODEL.params, rel=1e-6)
    assert len(calls[0].plan.ranks) == 8
    at = tasks.index(calls[0])
    backward = [i for i, t in enumerate(tasks) if isinstance(t, ComputeTask) and t.kind == "backward"]
    assert backward and max(backward) < at
    assert not any(isinstance(t, ComputeTask) and "shard copied" in t.name for t in tasks)


def _memory(p):
    from scalesim.parallel.step import compile_step, stage_memory
    return stage_memory(MODEL, p, compile_step(MODEL, DGX.gpu_spec, DGX, p, False).stages[0])


def test_without_ddp_the_stage_holds_fp32_gradients_for_every_parameter_and_no_bucket():
    with_ddp, without = _memory(plan(zero=1)), _memory(plan(zero=1, copies=False))
    assert without.grad_buckets == 0.0 < with_ddp.grad_buckets
    # the fp32 buffer of every parameter (not a slice) and the 16-bit .grad it is added from
    assert without.gradients == pytest.approx((4 + 2) * MODEL.params, rel=1e-6)
    assert without.optimizer == pytest.approx(with_ddp.optimizer)             # master and moments: the slice


def test_without_ddp_the_fp32_buffer_stays_whatever_the_reduce_type():
    # tidy15: FP32GradientAccumulator keeps its fp32 buffer for every parameter under accumulate_grad_in_fp32
    # (gradient_accumulator.py), and fp32_buffer_reduced all-reduces that buffer: a bf16 grad_reduce_dtype drops nothing
    bf16 = _memory(replace(plan(zero=1, copies=False), grad_reduce_dtype="bf16"))
    assert bf16.gradients == pytest.approx((4 + 2) * MODEL.params, rel=1e-6)
    assert bf16.gradients == pytest.approx(_memory(plan(zero=1, copies=False)).gradients)


def test_without_ddp_the_last_stage_reduces_its_tied_head_copy_with_its_fp32_buffer():
    # review15e: under PP the last stage holds its own copy of the tied embedding (tied_parameters.py), a parameter
    # of its FP32GradientAccumulator's buffer (gradient_accumulator.py:158-202), all-reduced over dp with the rest
    two_stages = ParallelPlan(Placement(tp=1, cp=1, dp=4, pp=2), 4, 2, "bf16", "adamw", "none", "flash", zero=1,
                              grad_reduce_dtype="fp32", grad_accumulation="fp32-add", host_dispatch_s=DISPATCH_S)
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, two_stages).tasks
    first, last = (sum(c.plan.size_bytes for c in grad_calls(tasks[rank])) for rank in (min(tasks), max(tasks)))
    assert first + last == pytest.approx(4 * (MODEL.params + MODEL.vocab * MODEL.hidden), rel=1e-6)


def test_zero1_in_ddp_without_fp32_accumulation_is_plain_ddp_all_reducing_its_buckets():
    # review15e: nanotron registers its fp32 hook (per-slice reduce-scatter) only with an FP32GradientAccumulator
    # (helpers.py:416-417); at ZeRO-1 without accumulate_grad_in_fp32 (the nanotron preset's zero1_over_ddp) DDP
    # all-reduces each 16-bit bucket itself; ZeroDistributedOptimizer's all-gather and copies back stay
    tasks = rank0(ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), 1, 2, "bf16", "adamw", "none", "flash", zero=1,
                               grad_reduce_dtype="bf16", zero1_over_ddp=True, host_dispatch_s=DISPATCH_S))
    calls = grad_calls(tasks)
    assert calls and all(c.plan.op == "all_reduce" for c in calls)
    assert sum(c.plan.size_bytes for c in calls) == pytest.approx(2 * MODEL.params, rel=1e-6)
    names = {t.name for t in tasks if isinstance(t, ComputeTask)}
    assert "zero-1 gathered slices copied" in names
    assert not names & {"bucket slices flattened", "reduce-scatter shard copied"}


def test_fp32_accumulation_left_at_auto_reduces_and_holds_fp32_gradients(tmp_path):
    # review15e: grad_reduce_dtype auto resolved to bf16 at ZeRO-1, so nanotron's fp32 buffer (4 bytes a parameter,
    # gradient_accumulator.py:173) was missing from memory while its all-reduce moved 4 bytes a parameter
    import yaml
    from scalesim.app.setup import prepare
    from scalesim.parallel.step import stage_memory
    from scalesim.scenario import load_scenario
    path = tmp_path / "nanotron.yaml"
    path.write_text(yaml.safe_dump({"name": "n", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": "llama3.2-1b",
                                    "training": {"framework": "nanotron", "seq_len": 1024, "global_batch": 32,
                                                 "micro_batch": 1},
                                    "parallel": {"dp": 8, "zero": 1, "grad_accumulation": "fp32-add"}}))
    step = prepare(*load_scenario(path)).step
    assert step.plan.grad_reduce_dtype == "fp32"
    memory = stage_memory(step.model, step.plan, step.stages[0])
    assert memory.gradients == pytest.approx((4 + 2) * step.model.params, rel=1e-6)   # fp32 buffer + 16-bit .grad
