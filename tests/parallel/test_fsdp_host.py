"""PyTorch FSDP's hooks on the host (costs/fsdp_host.py) and FSDP1's rate limiter (parallel/fsdp_limiter.py):
CPU time per unit and per original parameter, and the host blocking on the free event of the unshard two back."""

import pytest

import scalesim.parallel.fsdp as fsdp_module
import scalesim.parallel.fsdp_limiter as limiter_module
from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.parallel.builder import StepBuilder
from scalesim.parallel.rank_program import RankProgram
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
TINY = get_model({"kind": "transformer", "layers": 8, "hidden": 128, "heads": 2, "vocab": 1024}, seq_len=128)
LARGE = get_model({"kind": "transformer", "layers": 4, "hidden": 8192, "heads": 64, "vocab": 32000}, seq_len=4096)


def plan(fsdp=1, host=DISPATCH_S_PER_OP, prefetch="pre", micro_batches=1, micro_batch=1):
    return ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), micro_batch, micro_batches, "bf16", "adamw", "none",
                        "flash", zero=3, fsdp_version=fsdp, fsdp_backward_prefetch=prefetch, host_dispatch_s=host)


def program(model, p):
    return build_program(model, DGX.gpu_spec, DGX, p)


def with_params(monkeypatch, count):
    """Every unit holding `count` original parameters (the same GPU work)."""
    for module in (fsdp_module, limiter_module):
        monkeypatch.setattr(module, "original_params", lambda layer: count if layer.params > 0 else 0)


def test_a_tiny_unit_fsdp1_step_is_host_bound_and_slower_with_more_original_parameters(monkeypatch):
    steps = {}
    for count in (4, 16, 64):
        with_params(monkeypatch, count)
        prog = program(TINY, plan())
        tasks = prog.tasks[0]
        steps[count] = simulate(prog).end_s
        gpu_s = sum(t.duration_s for t in tasks if not isinstance(t, CollectiveTask) and t.stream == "compute")
        assert steps[count] > 3 * gpu_s                           # the host, not the GPU, sets the step
        assert steps[count] >= sum(t.host_s for t in tasks)      # and it cannot issue faster than its CPU time
    assert steps[4] < steps[16] < steps[64]


def test_a_large_unit_step_does_not_feel_the_hooks(monkeypatch):
    hooked = simulate(program(LARGE, plan())).end_s
    for module in (fsdp_module, limiter_module):
        monkeypatch.setattr(module, "hook_host_s", lambda *args, **kwargs: 0.0)
    free = simulate(program(LARGE, plan())).end_s
    assert free <= hooked < free * 1.002      # the first unit's hooks, before the GPU has work, and nothing more


def unshards(tasks):
    return [t for t in tasks if t.stream == limiter_module.UNSHARD_STREAM]


@pytest.mark.parametrize("prefetch", ["none", "pre", "post"])
def test_fsdp1_blocks_its_host_on_a_free_event_and_fsdp2_never_does(prefetch):
    one, two = program(TINY, plan(1, prefetch=prefetch)).tasks[0], program(TINY, plan(2, prefetch=prefetch)).tasks[0]
    gathers = [t for t in one if isinstance(t, CollectiveTask) and t.name.startswith("zero3 all_gather")]
    assert len(unshards(one)) == len(gathers) == len(unshards(two)) > 0     # one hook task per unshard in both
    assert sum(t.host_sync for t in unshards(one)) > len(gathers) / 2    # all but where fewer than two frees are queued
    assert not any(t.host_sync for t in unshards(two))


@pytest.mark.parametrize("model", [TINY, LARGE])
def test_fsdp1s_host_waits_at_each_blocks_unshard_for_the_forward_two_units_back(model):
    # _unshard blocks the CPU on the oldest of two queued free events: the block two back's post-forward reshard
    intervals = [i for i in simulate(program(model, plan()), exact=True).intervals if i.rank == 0]
    forward_end = {i.name: i.end_s for i in intervals if i.name.startswith("fwd block")}
    forward_start = {i.name: i.start_s for i in intervals if i.name.startswith("fwd block")}
    waits = sorted(i.end_s for i in intervals if i.name == "fsdp rate limiter, forward hooks")
    assert len(forward_end) == model.num_layers and len(waits) >= model.num_layers - 2
    for k in range(2, model.num_layers):
        released = waits[k - 2]                                       # the block k unshard's wait
        assert forward_end[f"fwd block{k - 2}"] - 1e-12 <= released <= forward_start[f"fwd block{k}"] + 1e-12


def test_fsdp2s_hooks_cost_more_per_parameter_where_its_code_swaps_each_parameter(monkeypatch):
    def hook_s(fsdp, count):
        with_params(monkeypatch, count)
        tasks = program(TINY, plan(fsdp)).tasks[0]
        return {name: sum(t.host_s for t in tasks if t.name.endswith(name)) for name in ("forward hooks", "pre_backward hooks")}
    one, two = (hook_s(v, 32)["pre_backward hooks"] - hook_s(v, 4)["pre_backward hooks"] for v in (1, 2))
    assert one == pytest.approx(0.0, abs=1e-12) and two > 0       # FSDP1 makes its views in the forward only
    forward_one, forward_two = (hook_s(v, 32)["forward hooks"] - hook_s(v, 4)["forward hooks"] for v in (1, 2))
    assert forward_two > forward_one > 0


def test_multi_micro_batch_fsdp1_passes_are_built_again_not_replayed():
    # the rate limiter's queue names tasks of earlier passes: a replayed pass would skip its updates
    builder = StepBuilder(TINY, DGX.gpu_spec, DGX, plan(micro_batches=4))
    rank = builder.simulated[0]
    assert RankProgram(builder, rank).tasks() == RankProgram(builder, rank).tasks(templates=False)
