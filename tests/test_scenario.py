"""Scenario copies with changes, as scaling curves, sweeps and the claims page make them."""

from scalesim.scenario import Scenario

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
