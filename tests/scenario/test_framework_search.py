"""training.framework in searches and re-validation (review15b): a search tries only the ZeRO stages the
framework's code runs, a re-validated scenario keeps the keys its framework set, and nanotron's preset
never assumes Megatron's host read of the gradient norm."""

from pathlib import Path

import pytest
import yaml

from scalesim.app.plans import search_points
from scalesim.app.setup import prepare
from scalesim.scenario import Scenario, load_scenario
from scalesim.scenario.frameworks import REFUSALS


def _file(tmp_path: Path, framework, parallel, name="s.yaml") -> Path:
    data = {"name": "fw", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": "llama3.2-1b",
            "training": {**({"framework": framework} if framework else {}), "seq_len": 1024, "global_batch": 64,
                         "micro_batch": 1},
            "parallel": parallel}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("framework,base_zero", [("nanotron", 1), ("torchtitan", 3), (None, 0)])
def test_a_search_tries_only_the_zero_stages_the_framework_can_run(tmp_path, framework, base_zero):
    path = _file(tmp_path, framework, {"zero": base_zero})
    base, file = load_scenario(path)
    stages = {p.zero for p in search_points(base, 8, file)[0]}
    for zero in stages:      # every stage tried is one the framework's scenario accepts
        Scenario.model_validate({**yaml.safe_load(path.read_text()), "parallel": {"zero": zero}})
    refused = {z for z in (0, 1, 2, 3) for r in REFUSALS.get(framework or "", ())
               if r.key == "parallel.zero" and r.refused(lambda key, z=z: z if key == "parallel.zero" else None)}
    assert stages == {0, 1, 2, 3} - refused and base_zero in stages


def test_revalidating_a_scenario_keeps_the_keys_its_framework_set(tmp_path):
    scenario, _ = load_scenario(_file(tmp_path, "torchtitan", {"zero": 3}))
    applied = scenario._framework_set
    assert ("parallel.fsdp_version", 2) in applied
    assert Scenario.model_validate(scenario)._framework_set == applied
    assert scenario._framework_set == applied          # the instance itself is not cleared
    assert scenario.with_changes(parallel={"zero": 0}).parallel.fsdp_version is None     # taken anew at zero 0


def test_nanotron_clips_on_the_device_even_when_its_zero1_is_not_over_ddp(tmp_path):
    # nanotron's clip_grad_norm keeps the norm a device tensor: no host read before the update at any stage,
    # whether or not the scenario models its ZeRO-1 inside DDP
    for parallel in ({"zero": 1, "zero1_over_ddp": False}, {"zero": 1}, {"zero": 0}):
        setup = prepare(*load_scenario(_file(tmp_path, "nanotron", parallel)))
        assert setup.plan.grad_clip_host_sync is False


def test_the_run_table_does_not_say_the_scenario_writes_keys_that_only_apply_to_other_plans(tmp_path):
    from scalesim.report.tables import framework_defaults_text

    path = _file(tmp_path, "llm-foundry", {"zero": 0})        # its FSDP keys apply at zero 3 only
    scenario, _ = load_scenario(path)
    assert scenario._framework_set == () and "fsdp" not in path.read_text()
    text = framework_defaults_text(dict(scenario._framework_set))
    assert "writes every key" not in text and "do not apply to this plan" in text
    assert framework_defaults_text({"parallel.fsdp_version": 1, "training.grad_clip_host_sync": False}) == (
        "parallel.fsdp_version=1, training.grad_clip_host_sync=false")


def _scenario(framework, parallel):
    return Scenario.model_validate({"name": "fw", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": "llama3.2-1b",
                                    "training": {"framework": framework, "seq_len": 1024, "global_batch": 32,
                                                 "micro_batch": 1}, "parallel": parallel})


def test_a_preset_reads_a_written_value_as_the_schema_does():
    # the schema reads tp: "2" as 2 and zero1_over_ddp: "false" as false: the preset's conditions and refusals too
    as_int, as_text = _scenario("torchtitan", {"zero": 3, "tp": 2, "dp": 4}), _scenario("torchtitan", {"zero": 3, "tp": "2", "dp": 4})
    assert as_text.parallel.tp == as_int.parallel.tp == 2
    assert as_text._framework_set == as_int._framework_set
    assert as_text.parallel.sequence_parallel and as_text.training.cross_entropy == "loss-parallel"
    assert not _scenario("megatron-core", {"zero": 1, "zero1_over_ddp": "false"}).parallel.zero1_over_ddp


@pytest.mark.parametrize("framework,graphs", [("torchtitan", True), (None, False)])
def test_a_zero3_plan_keeps_cuda_graphs_where_its_frameworks_fsdp_runs_them(tmp_path, framework, graphs):
    # torchtitan's ZeRO-3 is FSDP2 (graphs per block under torch.compile); without a framework it is DeepSpeed's,
    # which CUDA graphs cannot capture (scenario/graphs.py): the search and run's fixes resolve the version anew
    from scalesim.app.fitting import _keys_that_go_with
    from scalesim.app.plans import PlanPoint, scenario_for
    data = yaml.safe_load(_file(tmp_path, framework, {"zero": 0}).read_text())
    data["training"]["cuda_graphs"] = True
    base = Scenario.model_validate(data)
    point = scenario_for(base, PlanPoint(gpus=8, dp=8, zero=3))
    assert point.training.cuda_graphs is graphs and point.parallel.fsdp_version == (2 if graphs else None)
    fix = _keys_that_go_with(prepare(base), {"parallel": {"zero": 3}})
    assert fix["training"].get("cuda_graphs", True) is graphs
    assert base.with_changes(**fix).training.cuda_graphs is graphs


def test_nanotron_wraps_zero1_in_ddp_only_without_fp32_accumulation():
    # trainer.py:797-799 @67c5ebb6: no DDP when accumulate_grad_in_fp32 and zero_stage > 0 (nanoz1)
    assert not _scenario("nanotron", {"zero": 1, "grad_accumulation": "fp32-add"}).parallel.zero1_over_ddp
    assert _scenario("nanotron", {"zero": 1}).parallel.zero1_over_ddp
