"""A LoRA/QLoRA checkpoint saves the adapters and their optimizer state, not the frozen base."""

from scalesim.app.run import run
from scalesim.costs.reliability import checkpoint_bytes
from scalesim.models import get_model
from scalesim.scenario import Scenario


def result(finetune: str):
    return run(Scenario.model_validate({
        "name": "ft", "cluster": {"node": "dgx-h100", "gpus": 1}, "model": "llama3.2-1b",
        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "micro_batch": 2,
                     "finetune": finetune, "tokens": 1e8, "lora": {"rank": 16, "targets": "all-linear"}}}),
        scaling_counts=[], baseline=False)


def checkpoint_gb(r) -> float:
    return next(a["value"] for a in r.assumptions if a["input"] == "checkpoint size (GB)")


def test_a_lora_checkpoint_holds_the_adapters_state_only_and_stalls_less():
    lora, full = result("lora"), result("none")
    trained = lora.plan["trainable_params"]
    assert trained < 0.05 * get_model("llama3.2-1b", seq_len=1024).params   # adapters: a few percent at most
    assert checkpoint_gb(lora) * 1e9 == checkpoint_bytes(trained, "bf16", "adamw")
    assert checkpoint_gb(lora) < 0.05 * checkpoint_gb(full)
    assert lora.reliability["checkpoint_write_s"] < 0.05 * full.reliability["checkpoint_write_s"]
    assert "adapters" in next(a["source"] for a in lora.assumptions if a["input"] == "checkpoint size (GB)")
