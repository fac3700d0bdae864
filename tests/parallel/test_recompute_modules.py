"""Megatron-Core's selective recomputation by module (`training.recompute_modules`) and token
dropping with padding to capacity (`training.moe_capacity_factor`)."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.costs.recompute import RECOMPUTE_MODULES, module_saved_bytes_per_sample
from scalesim.errors import InputError
from scalesim.models.zoo import get_model
from scalesim.program import ComputeTask
from scalesim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
MOE = {"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 8, "vocab": 1000, "ffn": "swiglu",
       "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048}}


def scenario(modules=None, checkpointing="selective", capacity=None, model=MOE):
    training = {"precision": "bf16", "seq_len": 1024, "global_batch": 32, "micro_batch": 1,
                "activation_checkpointing": checkpointing, "recompute_modules": modules,
                "moe_capacity_factor": capacity}
    return Scenario.model_validate({"name": "tiny moe", "cluster": {"node": "dgx-h100"}, "model": model,
                                    "training": training, "parallel": {"dp": 8, "ep": 8}})


@pytest.fixture(scope="module")
def runs():
    out = {m: run(scenario(list(m) if m else None), None) for m in ((), ("moe_act",), ("moe_act", "layernorm"),
                                                                    ("moe",))}
    out["none"] = run(scenario(checkpointing="none"), None)
    out["full"] = run(scenario(checkpointing="full"), None)
    return out


def test_each_module_recomputed_costs_time_and_frees_activations(runs):
    none, act, both = runs["none"], runs[("moe_act",)], runs[("moe_act", "layernorm")]
    assert none.step_time_s < act.step_time_s < both.step_time_s
    activations = [r.memory_breakdown["activations"] for r in (none, act, both)]
    assert activations == sorted(activations, reverse=True) and len(set(activations)) == 3


def test_the_whole_moe_layer_recomputed_costs_less_than_full_recomputation_and_keeps_more(runs):
    moe, full = runs[("moe",)], runs["full"]
    assert moe.step_time_s < full.step_time_s
    assert moe.memory_breakdown["activations"] > full.memory_breakdown["activations"]
    assert moe.memory_breakdown["activations"] < runs["none"].memory_breakdown["activations"]


def test_recomputing_the_moe_layer_replays_its_all_to_alls_and_token_count_sync():
    tasks = prepare(scenario(["moe"])).step.program.tasks[0]
    assert any(isinstance(t, ComputeTask) and t.kind == "recompute" and t.host_sync for t in tasks)
    light = prepare(scenario(["moe_act"])).step.program.tasks[0]
    assert not any(isinstance(t, ComputeTask) and t.kind == "recompute" and t.host_sync for t in light)
    calls = lambda ts: sum(1 for t in ts if not isinstance(t, ComputeTask) and "ep_" in getattr(t, "name", ""))
    assert calls(tasks) > calls(light)


def test_module_ops_are_ops_the_zoo_blocks_have():
    models = [get_model(m, seq_len=512) for m in ("deepseek-v3", "qwen3-30b-a3b", "llama3-8b")]
    names = {op.name for model in models for layer in model.layers for op in layer.ops}
    for module, ops in RECOMPUTE_MODULES.items():
        assert set(ops) & names, module


def test_moe_act_within_moe_is_not_counted_twice():
    block = next(layer for layer in get_model("qwen3-30b-a3b", seq_len=512).layers if layer.expert_params)
    assert module_saved_bytes_per_sample(block, ("moe", "moe_act")) == module_saved_bytes_per_sample(block, ("moe",))


def test_padding_to_capacity_drops_the_token_count_sync():
    def syncs(capacity):
        tasks = prepare(scenario(checkpointing="none", capacity=capacity)).step.program.tasks[0]
        return sum(1 for t in tasks if isinstance(t, ComputeTask) and t.host_sync and t.kind == "forward")
    assert syncs(None) > 0 and syncs(1.0) == 0


@pytest.mark.parametrize("training, key", [
    ({"recompute_modules": ["moe_act"]}, "recompute_modules"),                       # checkpointing stays none
    ({"activation_checkpointing": "selective", "recompute_modules": ["attention"]}, "recompute_modules"),
    ({"activation_checkpointing": "selective", "finetune": "lora", "recompute_modules": ["mlp"]},
     "recompute_modules"),                                                           # not modelled with adapters
    ({"activation_checkpointing": "selective", "recompute_modules": ["moe"]},        # a dense model: no MoE layer
     "recompute_modules"),
    ({"activation_checkpointing": "selective", "recompute_modules": ["mla_up_proj"]}, "recompute_modules"),  # no MLA
    ({"moe_capacity_factor": 1.0}, "moe_capacity_factor"),                           # a dense model
    ({"moe_capacity_factor": 0.5}, "moe_capacity_factor"),
])
def test_bad_recompute_modules_or_capacity_are_refused_naming_the_key(tmp_path, training, key):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data["training"].update(training)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert key in result.output


def test_a_model_no_module_applies_to_says_so_instead_of_an_empty_list():
    data = {"name": "resnet", "cluster": {"node": "dgx-h100"}, "model": "resnet50",
            "training": {"precision": "bf16", "global_batch": 256, "micro_batch": 32,
                         "activation_checkpointing": "selective", "recompute_modules": ["core_attn"]}}
    with pytest.raises(InputError) as error:
        prepare(Scenario.model_validate(data))
    assert error.value.key == "training.recompute_modules"
    assert not str(error.value.detail).rstrip().endswith("allowed here:")
    assert "leave recompute_modules out" in str(error.value.detail)


def test_searched_plans_keep_the_recompute_modules_only_with_selective_recompute():
    # The plan searches (sweep --search, run's fixes) try none / selective / full on a scenario that
    # lists recompute modules: each point must be a valid scenario, the modules kept where they apply.
    from scalesim.app.plans import PlanPoint, scenario_for
    base = scenario(["moe_act", "layernorm"])
    kept = {r: scenario_for(base, PlanPoint(8, 8, recompute=r)).training for r in ("none", "selective", "full")}
    assert kept["selective"].recompute_modules == ["moe_act", "layernorm"]
    assert kept["none"].recompute_modules is None and kept["full"].recompute_modules is None
    assert kept["full"].activation_checkpointing == "full"
    lora = scenario_for(base, PlanPoint(8, 8, recompute="selective", finetune="lora")).training
    assert lora.finetune == "lora" and lora.recompute_modules is None     # not modelled with adapters


def test_recompute_modules_free_activations_with_offloaded_weights_too():
    # Full training with parallel.offload_params takes finetune_memory's path: the modules' outputs
    # are freed there as in training_memory (their recompute time was already charged).
    dense = {**MOE, "moe": None}
    def activations(modules):
        data = scenario(modules, model=dense).model_dump()
        data["parallel"] = {"dp": 8, "zero": 3, "offload_params": True}
        return prepare(Scenario.model_validate(data)).step.memory.activations
    assert activations(["core_attn", "mlp"]) < activations(None)
