"""The run table's host-bound hint says what would cut it, read from the result alone (StepResult.host):
CUDA graphs for the layers' kernel launches when they are off, FSDP2 or larger units for PyTorch FSDP's
hooks and FSDP1's rate-limiter waits (which no CUDA graph removes), nothing when host-bound time is small."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import scalesim.parallel.fsdp as fsdp_module
import scalesim.parallel.fsdp_limiter as limiter_module
from scalesim.app.run import run
from scalesim.report.host_note import WHAT, host_bound_note
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = load_scenario(ROOT / "scenarios" / "8xa100-ddp.yaml")
TINY = {"seq_len": 64, "micro_batch": 1}


def tiny_single_gpu(**training):
    scenario, file = SCENARIO
    return run(scenario.with_changes(cluster={"gpus": 1}, parallel={"dp": 1},
                                     training={**TINY, "global_batch": 4, **training}), file, baseline=False)


def test_a_dispatch_bound_eager_step_gets_the_cuda_graphs_hint_and_the_same_step_graphed_does_not():
    eager, graphed = tiny_single_gpu(), tiny_single_gpu(cuda_graphs=True)
    cpu = eager.host["cpu_s"]
    assert eager.breakdown.host_bound > 0.15 * eager.step_time_s
    assert cpu["layer_kernels"] > 0.9 * sum(cpu.values())          # the layers' launches are the host's work
    assert "training.cuda_graphs" in host_bound_note(eager)
    assert not eager.host["cuda_graphs"] and graphed.host["cuda_graphs"]
    assert graphed.host["cpu_s"]["layer_kernels"] < 0.5 * cpu["layer_kernels"]
    assert "cuda_graphs" not in host_bound_note(graphed)


def test_an_fsdp1_hook_bound_step_is_told_fsdp2_not_cuda_graphs(monkeypatch):
    # units of many original parameters: FSDP1's forward hook makes a view per parameter (costs/fsdp_host.py)
    for module in (fsdp_module, limiter_module):
        monkeypatch.setattr(module, "original_params", lambda layer: 64 if layer.params > 0 else 0)
    scenario, file = SCENARIO
    r = run(scenario.with_changes(parallel={"zero": 3, "fsdp_version": 1}, training={**TINY, "global_batch": 8}),
            file, baseline=False)
    cpu = r.host["cpu_s"]
    assert r.host["fsdp_version"] == 1 and not r.host["cuda_graphs"]
    assert r.host["cuda_graphs_blocked_by"] == "PyTorch FSDP1"
    assert r.breakdown.host_bound > 0.15 * r.step_time_s
    assert cpu["fsdp"] > 0.75 * sum(cpu.values())
    assert r.host["blocking_syncs"]["fsdp_rate_limiter"] > 0       # limit_all_gathers blocks the host
    note = host_bound_note(r)
    assert "cuda_graphs" not in note and "FSDP2" in note and "rate limiter" in note


def test_the_host_split_goes_into_the_json_and_the_host_cannot_issue_faster_than_its_cpu_time():
    r = tiny_single_gpu()
    out = json.loads(json.dumps(r.to_json()))
    assert out["host"]["cpu_s"] == r.host["cpu_s"]
    assert r.step_time_s >= sum(r.host["cpu_s"].values()) > 0
    assert set(out["host"]["blocking_syncs"]) == {"fsdp_rate_limiter", "other"}
    assert out["breakdown_s"]["host_bound"] == r.breakdown.host_bound


def result(host_bound, step=1.0, **host):
    return SimpleNamespace(breakdown=SimpleNamespace(host_bound=host_bound), step_time_s=step, host=host)


LAYER_BOUND = {"cpu_s": {"layer_kernels": 0.8, "fsdp": 0.0, "other": 0.1},
               "blocking_syncs": {"fsdp_rate_limiter": 0, "other": 1}}


def test_the_cuda_graphs_hint_needs_them_off_and_host_bound_time_that_is_not_small():
    assert "training.cuda_graphs" in host_bound_note(result(0.3, cuda_graphs=False, fsdp_version=None, **LAYER_BOUND))
    graphed = host_bound_note(result(0.3, cuda_graphs=True, fsdp_version=None, **LAYER_BOUND))
    assert "cuda_graphs" not in graphed and "already as CUDA graphs" in graphed
    assert host_bound_note(result(0.001, cuda_graphs=False, fsdp_version=None, **LAYER_BOUND)) == WHAT
    assert host_bound_note(result(0.3)) == WHAT                  # a result that does not say its causes


def test_fsdp2_hooks_are_not_told_to_move_to_fsdp2():
    hooks = {"cpu_s": {"layer_kernels": 0.1, "fsdp": 0.8, "other": 0.1},
             "blocking_syncs": {"fsdp_rate_limiter": 0, "other": 0}}
    two = host_bound_note(result(0.3, cuda_graphs=False, fsdp_version=2, **hooks))
    one = host_bound_note(result(0.3, cuda_graphs=False, fsdp_version=1, **hooks))
    assert "larger units" in two and "FSDP2" not in two and "FSDP2" in one
    assert "cuda_graphs" not in two + one


def test_a_dropless_moe_step_is_not_told_cuda_graphs_remove_its_launches():
    # dropless MoE experts run eagerly even with training.cuda_graphs (costs/host.py outside_cuda_graphs):
    # turning graphs on leaves most of the layers' launch time, so the hint must not promise it (review13b)
    # at ZeRO-1: the scenario's DeepSpeed ZeRO-3 cannot run CUDA graphs at all (scenario/graphs.py)
    scenario, file = load_scenario(ROOT / "scenarios" / "64xh100-mixtral-8x7b-ep8.yaml")
    eager, graphed = (run(scenario.with_changes(training={"cuda_graphs": on}, parallel={"zero": 1}), file,
                          baseline=False) for on in (False, True))
    layer, outside = eager.host["cpu_s"]["layer_kernels"], eager.host["layer_kernels_outside_graphs_s"]
    assert eager.breakdown.host_bound > 0.05 * eager.step_time_s
    assert graphed.host["cpu_s"]["layer_kernels"] > 0.5 * layer            # graphs leave most of it
    assert outside <= graphed.host["cpu_s"]["layer_kernels"] <= layer      # what they leave includes the eager part
    assert outside > 0.5 * layer
    note = host_bound_note(eager)
    assert "training.cuda_graphs" not in note and "MoE" in note


def test_a_dense_step_has_no_launch_time_outside_the_graphs():
    r = tiny_single_gpu()
    assert r.host["layer_kernels_outside_graphs_s"] == 0.0 < r.host["cpu_s"]["layer_kernels"]


def test_the_cuda_graphs_hint_is_not_given_when_most_launches_are_in_eager_moe_experts():
    moe = {**LAYER_BOUND, "layer_kernels_outside_graphs_s": 0.6}
    note = host_bound_note(result(0.3, cuda_graphs=False, fsdp_version=None, **moe))
    assert "training.cuda_graphs" not in note and "75% of it in dropless MoE experts" in note
    few = {**LAYER_BOUND, "layer_kernels_outside_graphs_s": 0.1}
    assert "training.cuda_graphs" in host_bound_note(result(0.3, cuda_graphs=False, fsdp_version=None, **few))
