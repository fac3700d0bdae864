"""Whole training steps of models with sliding windows (models/windows.py) against the same models without."""

import pytest

import scalesim.models.zoo as zoo
from scalesim.app.setup import prepare, simulate_setup
from scalesim.scenario import Scenario


def _step_s(model, seq, cp=1, **training):
    data = {"name": "w", "cluster": {"node": "dgx-h100", "gpus": cp}, "model": model,
            "training": {"precision": "bf16", "seq_len": seq, "global_batch": 1, "micro_batch": 1, **training}}
    if cp > 1:      # both with and without windows on Transformer Engine's all-gather path (the ring refuses windows)
        data["parallel"] = {"cp": cp, "zero": 3, "cp_comm_type": "all_gather"}
    return simulate_setup(prepare(Scenario.model_validate(data))).end_s


@pytest.fixture
def without_windows(monkeypatch):
    """A function that times a step with the zoo's sliding windows taken away."""
    def run(*args, **kwargs):
        monkeypatch.setattr(zoo, "SLIDING_WINDOWS", {})
        zoo._build_zoo.cache_clear()
        try:
            return _step_s(*args, **kwargs)
        finally:
            monkeypatch.undo()
            zoo._build_zoo.cache_clear()
    return run


@pytest.mark.parametrize("model, seq, cp, training", [
    ("mistral-7b", 8192, 1, {"finetune": "lora", "activation_checkpointing": "full"}),
    ("gemma2-9b", 8192, 1, {"finetune": "lora", "activation_checkpointing": "full"}),
    ("mistral-7b", 16384, 2, {}),
    ("gemma2-9b", 8192, 4, {}),
    ("phi-3-mini", 4096, 2, {}),
])
def test_a_windowed_model_is_faster_than_the_same_model_without_windows(without_windows, model, seq, cp, training):
    assert _step_s(model, seq, cp, **training) < without_windows(model, seq, cp, **training)


@pytest.mark.parametrize("model, seq, cp", [("mistral-7b", 4096, 1), ("mistral-7b", 2048, 2), ("gemma2-9b", 4096, 1),
                                            ("phi-3-mini", 2048, 1)])
def test_at_a_sequence_no_longer_than_the_window_the_step_is_unchanged(without_windows, model, seq, cp):
    training = {} if cp > 1 else {"finetune": "lora"}
    assert _step_s(model, seq, cp, **training) == without_windows(model, seq, cp, **training)
