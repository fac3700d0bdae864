"""Scenario copies with changes, as scaling curves, sweeps and the claims page make them."""

from pathlib import Path

import pytest

from scalesim.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[1]

BASE = {"name": "s", "cluster": {"node": "dgx-a100"}, "training": {"global_batch": 8},
        "model": {"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "kv_heads": 2}}


def test_a_changed_model_replaces_the_old_one_whole():
    inline = Scenario.model_validate(BASE)
    assert inline.with_changes(model="gpt2-124m").model == "gpt2-124m"
    other = {"kind": "transformer", "layers": 4, "hidden": 512, "heads": 8, "vocab": 1000}
    assert inline.with_changes(model=other).model_dump()["model"].get("kv_heads") in (None, 8)


def test_other_sections_keep_the_keys_not_changed():
    changed = Scenario.model_validate(BASE).with_changes(training={"micro_batch": 2})
    assert (changed.training.global_batch, changed.training.micro_batch) == (8, 2)


# ---------------------------------------------------------------- one error type for library users

def test_the_library_raises_scalesim_input_error_not_pydantic():
    import scalesim

    base, _ = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    with pytest.raises(scalesim.InputError) as err:
        base.with_changes(training={"global_batch": -8})
    assert err.value.key == "training.global_batch" and "greater than 0" in str(err.value)
    with pytest.raises(scalesim.InputError, match="micro_bach"):
        base.with_changes(training={"micro_bach": 4})


def test_load_scenario_raises_input_error_with_the_file(tmp_path):
    import scalesim

    path = tmp_path / "s.yaml"
    path.write_text((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text().replace("dp: 8", "dp: [8]"))
    with pytest.raises(scalesim.InputError) as err:
        load_scenario(path)
    assert err.value.file == str(path) and err.value.key == "parallel.dp"


def test_a_fabric_typo_is_refused_on_a_one_node_cluster_too():
    from scalesim import InputError
    from scalesim.app.setup import prepare

    base, _ = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    one_node = base.with_changes(cluster={"fabric": {"link": "ib-ndrr"}})
    with pytest.raises(InputError) as err:
        prepare(one_node, "s.yaml")
    assert err.value.key == "cluster.fabric.link" and "ib-ndr" in str(err.value)
    prepare(base.with_changes(cluster={"fabric": {"link": "ib-ndr"}}), "s.yaml")     # a valid one is fine


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_numbers_must_be_finite(value):
    from scalesim import InputError

    base, _ = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    with pytest.raises(InputError, match="finite"):
        base.with_changes(training={"tokens": value})


def test_keys_that_describe_one_framework_setting_are_refused_where_they_would_be_ignored():
    import scalesim
    from scalesim.app.setup import prepare

    base, _ = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    with pytest.raises(scalesim.InputError, match="needs zero: 1") as err:
        base.with_changes(parallel={"zero": 3, "zero1_over_ddp": True})
    assert err.value.key == "parallel.zero1_over_ddp"
    assert base.with_changes(parallel={"zero": 1, "zero1_over_ddp": True}).parallel.zero1_over_ddp
    with pytest.raises(scalesim.InputError, match="SwiGLU") as err:      # GPT-2: GELU MLP, no Llama block
        prepare(base.with_changes(training={"saved_activations": "nanotron"}))
    assert err.value.key == "training.saved_activations"


def test_a_fabric_nic_count_left_to_its_default_is_not_held_against_a_smaller_node(tmp_path):
    """A 4-GPU node joined by a fabric without nics_per_node runs, also in the copies `run` makes for its
    scaling curve (with_changes keeps defaults as defaults); a count the user wrote above the node's GPUs
    is refused naming the key."""
    from scalesim.app.setup import prepare
    from scalesim.errors import InputError
    from scalesim.scenario import load_scenario
    path = tmp_path / "four.yaml"
    text = ("name: two-4090-boxes\ncluster: {node: rtx4090-pcie-4, nodes: 2, fabric: {link: eth-100g%s}}\n"
            "model: gpt2-124m\ntraining: {precision: bf16, global_batch: 64, micro_batch: 8, seq_len: 1024}\n")
    path.write_text(text % "")
    scenario, file = load_scenario(path)
    copy = scenario.with_changes(training={"global_batch": 128})
    assert "nics_per_node" not in copy.cluster.fabric.model_fields_set
    prepare(copy, file)
    path.write_text(text % ", nics_per_node: 8")
    scenario, file = load_scenario(path)
    with pytest.raises(InputError) as refused:
        prepare(scenario.with_changes(training={"global_batch": 128}), file)
    assert refused.value.key == "cluster.fabric.nics_per_node"
