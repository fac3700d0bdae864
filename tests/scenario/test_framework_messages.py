"""An error about a key training.framework's preset set says so: the user did not write the value it blames
(scenario/frameworks.py blame_preset), whether the schema, the scenario's own checks or `prepare` finds it."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.scenario import load_scenario


def _file(tmp_path: Path, framework: str | None, training: dict, parallel: dict, model: str = "llama3.2-1b") -> Path:
    data = {"name": "blame", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": model,
            "training": {**({} if framework is None else {"framework": framework}), "seq_len": 1024,
                         "global_batch": 32, **training}, "parallel": parallel}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_torchtitans_tp_overlap_refusal_names_the_layout_its_preset_chose(tmp_path):
    path = _file(tmp_path, "torchtitan", {}, {"tp": 2, "tp_comm_overlap": True})
    out = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert out.exit_code == 2
    assert "parallel.tp_comm_overlap" in out.output
    assert "sequence_parallel_layout is batch-first (set by training.framework: torchtitan; write it to override)" \
        in " ".join(out.output.split())


def test_a_value_the_user_wrote_is_not_blamed_on_the_framework(tmp_path):
    path = _file(tmp_path, "torchtitan", {}, {"tp": 2, "tp_comm_overlap": True, "sequence_parallel_layout": "batch-first"})
    with pytest.raises(InputError, match="sequence_parallel_layout: seq-first") as err:
        load_scenario(path)
    assert "set by training.framework" not in str(err.value)


def test_the_cuda_graphs_refusal_names_the_fsdp_version_the_preset_chose(tmp_path):
    with pytest.raises(InputError) as err:
        load_scenario(_file(tmp_path, "llm-foundry", {"cuda_graphs": True}, {"zero": 3}))
    assert err.value.key == "training.cuda_graphs"
    assert "fsdp_version is 1 (set by training.framework: llm-foundry" in str(err.value)


def test_prepares_errors_blame_the_preset_too(tmp_path):
    # nanotron's saved activations are its SwiGLU block's: a GELU model has none
    scenario, file = load_scenario(_file(tmp_path, "nanotron", {}, {}, model="gpt2-350m"))
    with pytest.raises(InputError) as err:
        prepare(scenario, file)
    assert err.value.key == "training.saved_activations" and err.value.file == file
    assert "saved_activations is nanotron (set by training.framework: nanotron" in str(err.value)


def test_a_message_that_names_no_preset_key_is_unchanged(tmp_path):
    # "the attention core" is not nanotron's attention key (flash2)
    path = _file(tmp_path, "nanotron", {"finetune": "lora", "activation_checkpointing": "selective",
                                        "recompute_modules": ["core_attn"]}, {})
    with pytest.raises(InputError, match="attention core") as err:
        load_scenario(path)
    assert "set by training.framework" not in str(err.value)


def test_an_unknown_keys_list_of_allowed_keys_blames_no_preset_key(tmp_path):
    # "Allowed here: dp, tp, ..." lists every key of the section: the ones torchtitan's preset set are named there
    # as keys one may write, not as the cause (the did-you-mean names the key meant, and that one is blamed)
    path = _file(tmp_path, "torchtitan", {}, {"tp": 2, "sequence_paralel": False})
    with pytest.raises(InputError, match="Allowed here:") as err:
        load_scenario(path)
    assert err.value.key == "parallel.sequence_paralel"
    assert "sequence_parallel is true (set by training.framework: torchtitan" in str(err.value)
    for other in ("sequence_parallel_layout", "tp_recompute_allgather", "cp_comm_type", "fsdp_version"):
        assert f"{other} is" not in str(err.value)
