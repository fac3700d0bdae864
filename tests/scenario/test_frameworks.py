"""training.framework (scalesim/scenario/frameworks.py): a preset of defaults for the keys that describe one
framework's code; a written key wins, null changes nothing, a plan the framework cannot run is refused."""

import json
import typing
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.scenario import TrainingSpec, load_scenario
from scalesim.scenario.frameworks import FRAMEWORKS, PRESETS

# One plan per framework under which every conditional row of its preset applies (or, for torchtitan's two
# cross-entropy rows, the tp > 1 one).
PLANS = {
    "megatron-core": ({"precision": "fp8"}, {"zero": 1, "tp": 2}),
    "nemo": ({}, {"zero": 2}),
    "megatron-deepspeed": ({}, {"zero": 1, "tp": 2}),
    "deepspeed": ({}, {"zero": 2}),
    "nanotron": ({}, {"zero": 1, "tp": 2}),
    "torchtitan": ({"precision": "fp8"}, {"zero": 3, "tp": 2, "cp": 2}),
    "hf-trainer": ({}, {"zero": 0}),
    "llm-foundry": ({}, {"zero": 3}),
}


def _data(framework, training=None, parallel=None, model="llama3.2-1b", node="dgx-h100") -> dict:
    return {"name": f"fw-{framework}", "cluster": {"node": node, "nodes": 1}, "model": model,
            "training": {**({} if framework is None else {"framework": framework}), "seq_len": 1024,
                         "global_batch": 32, "micro_batch": 1, **(training or {})},
            "parallel": parallel or {}}


def _file(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_schema_lists_every_preset_and_no_other():
    allowed = typing.get_args(typing.get_args(TrainingSpec.model_fields["framework"].annotation)[0])
    assert set(allowed) == set(FRAMEWORKS) == set(PLANS)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_preset_is_the_same_scenario_as_writing_its_keys(tmp_path, framework):
    training, parallel = PLANS[framework]
    scenario, file = load_scenario(_file(tmp_path, _data(framework, training, parallel)))
    applied = dict(scenario._framework_set)
    # every row of the preset whose condition this plan meets was applied (torchtitan: one cross-entropy row)
    assert {k for k, _ in applied.items()} == {row.key for row in PRESETS[framework]}
    written = {"training": dict(training), "parallel": dict(parallel)}
    for key, value in applied.items():
        section, field = key.split(".")
        written[section][field] = value
    plain, _ = load_scenario(_file(tmp_path, _data(None, written["training"], written["parallel"]), "plain.yaml"))
    assert plain._framework_set == ()
    a, b = prepare(scenario, file), prepare(plain)
    assert a.plan == b.plan and a.model == b.model      # the preset reaches the plan and the model as the keys do


def test_megatron_deepspeed_turns_its_layer_sync_on_and_lengthens_the_step(tmp_path):
    data = _data("megatron-deepspeed", {"precision": "fp16", "micro_batch": 1}, {"tp": 8}, model="gpt2-350m",
                 node="dgx-a100")
    with_framework = prepare(*load_scenario(_file(tmp_path, data)))
    plan = with_framework.plan
    assert plan.layer_forward_host_sync and plan.attention == "fused" and not plan.grad_clip_host_sync
    data["training"].pop("framework")
    data["training"]["attention"] = "fused"
    without_sync = run(*load_scenario(_file(tmp_path, data, "b.yaml")), baseline=False)
    synced = run(with_framework.scenario, with_framework.file, baseline=False)
    assert synced.step_time_s > without_sync.step_time_s      # the host waits for the GPU once a layer forward


def test_deepspeed_at_zero_2_reads_no_norm_on_the_host_so_its_step_is_no_longer_than_megatron_cores(tmp_path):
    steps = {}
    for framework in ("deepspeed", "megatron-core"):
        scenario, file = load_scenario(_file(tmp_path, _data(framework, {}, {"zero": 2}, model="gpt2-350m",
                                                             node="dgx-a100"), f"{framework}.yaml"))
        setup = prepare(scenario, file)
        assert setup.plan.grad_clip_host_sync is (framework == "megatron-core")
        steps[framework] = run(scenario, file, baseline=False).step_time_s
    assert steps["deepspeed"] <= steps["megatron-core"]


def test_a_written_key_beats_the_preset(tmp_path):
    data = _data("megatron-deepspeed", {"layer_forward_host_sync": False, "attention": "flash"}, {"zero": 1})
    scenario, file = load_scenario(_file(tmp_path, data))
    assert not scenario.training.layer_forward_host_sync and scenario.training.attention == "flash"
    unwritten = {"training.grad_clip_host_sync": False, "training.cross_entropy": "fp32-upcast"}
    assert dict(scenario._framework_set) == unwritten
    result = run(scenario, file, baseline=False)
    assert result.plan["framework"] == "megatron-deepspeed"
    assert result.plan["framework_defaults"] == unwritten


def test_megatron_deepspeeds_loss_runs_over_fp32_logits_in_16_bit_training_only(tmp_path):
    # gpt_model.py: cross_entropy(output.float(), labels): the cast and the loss's passes over fp32 logits
    steps = {}
    for precision, written in (("fp16", None), ("fp16", "fused"), ("fp32", None)):
        training = {"precision": precision, **({} if written is None else {"cross_entropy": written})}
        data = _data("megatron-deepspeed", training, {"zero": 1, "tp": 2}, model="gpt2-350m", node="dgx-a100")
        scenario, file = load_scenario(_file(tmp_path, data, f"{precision}-{written}.yaml"))
        steps[precision, written] = run(scenario, file, baseline=False).step_time_s
        set_by_preset = dict(scenario._framework_set).get("training.cross_entropy")
        assert set_by_preset == ("fp32-upcast" if (precision, written) == ("fp16", None) else None)
    assert steps["fp16", None] > steps["fp16", "fused"]      # the fp32 passes over the logits take time


def test_an_unknown_framework_exits_2_with_the_allowed_list(tmp_path):
    path = _file(tmp_path, _data("pytorch-lightning"))
    out = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert out.exit_code == 2
    assert "training.framework" in out.output and str(path) in out.output
    assert all(name in out.output for name in FRAMEWORKS)


@pytest.mark.parametrize("framework,parallel,key", [
    ("nanotron", {"zero": 3}, "parallel.zero"),
    ("torchtitan", {"zero": 1}, "parallel.zero"),
    ("torchtitan", {"zero": 3, "fsdp_version": 1}, "parallel.fsdp_version"),
    ("deepspeed", {"zero": 3, "fsdp_version": 2}, "parallel.fsdp_version"),
    ("megatron-core", {"zero": 1, "zero1_over_ddp": True}, "parallel.zero1_over_ddp"),
    # review15e: nanotron builds no DDP with accumulate_grad_in_fp32 at ZeRO-1 (trainer.py:797-799)
    ("nanotron", {"zero": 1, "dp": 8, "grad_accumulation": "fp32-add", "zero1_over_ddp": True}, "parallel.zero1_over_ddp"),
])
def test_a_plan_the_framework_cannot_run_exits_2_naming_the_key(tmp_path, framework, parallel, key):
    path = _file(tmp_path, _data(framework, {}, parallel))
    out = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert out.exit_code == 2
    assert key in out.output and str(path) in out.output and "allowed" in out.output


def test_framework_null_changes_nothing(tmp_path):
    data = _data(None, {}, {"zero": 1}, model="gpt2-350m", node="dgx-a100")
    outputs = []
    for name, training in (("a.yaml", {}), ("b.yaml", {"framework": None})):
        path = _file(tmp_path, {**data, "training": {**data["training"], **training}}, name)
        out = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--json"])
        assert out.exit_code == 0, out.output
        outputs.append(json.loads(out.output))
    assert outputs[0] == outputs[1]
    assert "framework" not in outputs[0]["plan"]


def test_a_changed_plan_takes_the_presets_defaults_anew(tmp_path):
    # llm-foundry's FSDP keys apply at zero 3 only: a sweep to zero 0 must not carry them as if written
    scenario, _ = load_scenario(_file(tmp_path, _data("llm-foundry", {}, {"zero": 3})))
    assert scenario.parallel.fsdp_version == 1 and scenario.parallel.fsdp_backward_prefetch == "post"
    ddp = scenario.with_changes(parallel={"zero": 0})
    assert ddp.parallel.fsdp_version is None and ddp._framework_set == ()
    assert ddp.with_changes(parallel={"zero": 3}).parallel.fsdp_version == 1


def test_a_refusal_is_an_input_error_outside_the_cli_too():
    with pytest.raises(InputError, match="allowed with framework nanotron: 0, 1"):
        from scalesim.scenario import Scenario
        Scenario.model_validate(_data("nanotron", {}, {"zero": 2}))
