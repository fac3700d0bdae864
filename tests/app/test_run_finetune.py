"""Fine-tuning end to end: what fits where (issue 21's checks), step-time ordering, the fit search."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.costs.compute import layer_time
from scalesim.app.fitting import fit_options
from scalesim.app.setup import memory_of, prepare, simulate_setup
from scalesim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result


def scenario(model="llama3.2-1b", gpus=1, **training) -> Scenario:
    base = {"precision": "bf16", "seq_len": 1024, "global_batch": 4 * gpus, "micro_batch": 2}
    return Scenario.model_validate({"name": "ft", "cluster": {"node": "rtx4090-pcie-4", "gpus": gpus},
                                    "model": model, "training": {**base, **training}})


def test_qlora_70b_fits_two_4090s_and_full_training_does_not(tmp_path):
    path = ROOT / "scenarios" / "2x4090-llama2-70b-qlora.yaml"
    assert run_cli("run", str(path), "--no-plots").exit_code == 0
    data = yaml.safe_load(path.read_text())
    data["training"]["finetune"] = "none"
    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump(data))
    result = run_cli("run", str(full), "--no-plots", "--json")
    assert result.exit_code == 3
    # the GPUs would hold it layer by layer; the 128 GB of host RAM cannot hold weights and Adam state
    assert "host memory" in yaml.safe_load(result.output)["reason"]


def test_lora_7b_fits_one_4090():
    assert run_cli("run", str(ROOT / "scenarios" / "1x4090-llama2-7b-lora.yaml"), "--no-plots").exit_code == 0


def test_lora_step_lies_between_forward_only_and_full_training():
    full = prepare(scenario())
    lora = prepare(scenario(finetune="lora"))
    plan = full.plan
    forward_only = plan.micro_batches * sum(layer_time(layer, full.gpu, "bf16", plan.micro_batch).forward_s
                                            for layer in full.model.layers)
    assert forward_only < simulate_setup(lora).end_s < simulate_setup(full).end_s


def test_qlora_is_never_faster_than_lora_on_one_gpu():
    # Same adapters and work, plus a dequantisation before every use of a frozen matrix.
    lora = simulate_setup(prepare(scenario(finetune="lora"))).end_s
    assert simulate_setup(prepare(scenario(finetune="qlora"))).end_s > lora


def test_offloaded_weights_cost_time_and_save_memory():
    kept = prepare(scenario(finetune="lora", activation_checkpointing="full"))
    offloaded = prepare(scenario(finetune="lora", activation_checkpointing="full").with_changes(
        parallel={"offload_params": True}))
    assert memory_of(offloaded).weights < memory_of(kept).weights
    assert simulate_setup(offloaded).end_s >= simulate_setup(kept).end_s


def test_fit_search_proposes_lora_and_qlora_only_when_allowed():
    big = dict(model="llama2-7b", seq_len=2048)
    setup = prepare(scenario(**big))
    assert memory_of(setup).total > setup.gpu.memory_bytes
    changes = [o.change for o in fit_options(setup)]
    assert not any("finetune" in c for c in changes)
    allowed = prepare(scenario(**big, finetune_allowed=["lora", "qlora"]))
    options = fit_options(allowed)
    assert any("training.finetune: lora" in o.change for o in options)
    assert all(o.memory_bytes <= allowed.gpu.memory_bytes for o in options)


@pytest.mark.parametrize("training,key", [({"finetune": "lora", "lora": {"targets": ["gate"]}}, "lora.targets"),
                                          ({"finetune": "lora", "lora": {"rank": 0}}, "lora.rank"),
                                          ({"finetune": "lora", "lora": {"layout": "nemo"}}, "lora.layout"),
                                          ({"finetune": "lora", "lora": {"dropout": 1.0}}, "lora.dropout"),
                                          ({"finetune": "dora"}, "training.finetune"),
                                          ({"optimizer": "adamw-4bit"}, "training.optimizer")])
def test_bad_fine_tuning_input_names_the_key(tmp_path, training, key):
    data = {"name": "bad", "cluster": {"node": "rtx4090-pcie-4", "gpus": 1}, "model": "gpt2-124m",
            "training": {"global_batch": 2, **training}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_cli("run", str(path), "--no-plots")
    assert result.exit_code == 2 and key in result.output


def test_finetuning_a_vision_model_is_refused(tmp_path):
    path = tmp_path / "resnet.yaml"
    path.write_text(yaml.safe_dump({"name": "r", "cluster": {"node": "rtx4090-pcie-4", "gpus": 1},
                                    "model": "resnet50", "training": {"global_batch": 8, "finetune": "lora"}}))
    result = run_cli("run", str(path), "--no-plots")
    assert result.exit_code == 2 and "training.finetune" in result.output
