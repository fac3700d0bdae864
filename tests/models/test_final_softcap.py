"""Gemma 2's final-logit soft-capping (models/softcap.py): three eager kernels over the logits, tanh's output kept."""

from dataclasses import replace

import pytest

import scalesim.models.zoo as zoo
from scalesim.app.setup import prepare
from scalesim.costs.compute import layer_time
from scalesim.hardware import get_gpu
from scalesim.models.transformer import lm_head
from scalesim.parallel.sharding import shard_layer
from scalesim.scenario import Scenario

H100 = get_gpu("h100-sxm")


def _extra_s(tokens, vocab, tp=1):
    """Forward plus backward seconds the cap adds to the head of one sample, on one of tp GPUs."""
    def total(head):
        t = layer_time(shard_layer(head, tp, 1, False), H100, "bf16", 1)
        return t.forward_s + t.backward_s
    return total(lm_head(tokens, 3584, vocab, tied=True, softcap=30.0)) - total(lm_head(tokens, 3584, vocab, tied=True))


def test_the_cap_keeps_one_16_bit_tensor_of_the_logits():
    """tanh saves its output for tanh_backward; dividing and multiplying by the cap save nothing."""
    for tokens, vocab in ((8192, 256000), (4096, 256000), (8192, 128000)):
        capped = lm_head(tokens, 3584, vocab, tied=True, softcap=30.0).activation_bytes
        assert capped - lm_head(tokens, 3584, vocab, tied=True).activation_bytes == 2 * tokens * vocab


def test_its_time_grows_with_tokens_times_vocabulary_and_splits_with_the_vocabulary():
    base = _extra_s(8192, 256000)
    assert base > 0
    assert _extra_s(16384, 256000) == pytest.approx(2 * base, rel=0.01)
    assert _extra_s(8192, 128000) == pytest.approx(base / 2, rel=0.01)
    assert _extra_s(8192, 256000, tp=2) == pytest.approx(base / 2, rel=0.01)      # vocabulary-parallel logits


def test_the_cap_moves_the_logits_seven_times_in_backward_and_six_in_forward():
    """Forward: / cap, tanh, * cap each read and write the logits. Backward: grad * cap and grad / cap read
    and write one tensor each, tanh_backward reads the gradient and tanh's output and writes one."""
    cap = lm_head(1024, 3584, 256000, tied=True, softcap=30.0)
    ops = [op for op in cap.ops if op.name.startswith("final_softcap")]
    logits = 1024 * 256000
    assert sum(op.elements_moved for op in ops) == 6 * logits
    assert sum(op.backward_elements for op in ops) == 7 * logits


def _gemma_memory(monkeypatch, capped):
    if not capped:
        entry = zoo._ZOO["gemma2-9b"]
        monkeypatch.setitem(zoo._ZOO, "gemma2-9b", replace(entry, config={**entry.config, "final_softcap": None}))
    zoo._build_zoo.cache_clear()
    try:
        setup = prepare(Scenario.model_validate({
            "name": "g", "cluster": {"node": "dgx-h100", "gpus": 1}, "model": "gemma2-9b",
            "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 2, "micro_batch": 2,
                         "finetune": "lora"}}))
        return setup.step.memory.activations
    finally:
        monkeypatch.undo()
        zoo._build_zoo.cache_clear()


def test_a_gemma2_step_holds_the_capped_logits_of_its_micro_batch(monkeypatch):
    assert _gemma_memory(monkeypatch, True) - _gemma_memory(monkeypatch, False) == pytest.approx(
        2 * 2 * 4096 * 256000, rel=1e-6)
