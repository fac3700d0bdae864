"""Megatron's legacy GPT layer issues its Python-level calls from the host (scalesim/costs/megatron_host.py):
with tensor parallelism and small micro-batches of a small model they, not the GPU, set the pace; big GEMMs
hide them."""

from pathlib import Path

import pytest
import yaml

import scalesim.app.setup as setup
from scalesim.app.run import run
from scalesim.costs.host import layer_kernels
from scalesim.costs.megatron_host import layer_calls, layer_host_s, megatron_layer_host_s
from scalesim.models import get_model
from scalesim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "validation" / "scenarios"


def _gpt350m(tmp_path, tp: int, micro_batch: int, **training) -> Path:
    scenario = {"name": f"gpt350m-tp{tp}", "cluster": {"node": "dgx-a100", "nodes": 1}, "model": "gpt2-350m",
                "training": {"precision": "fp16", "seq_len": 1024, "global_batch": 4 * micro_batch * (8 // tp),
                             "micro_batch": micro_batch, "attention": "fused", **training},
                "parallel": {"dp": 8 // tp, "tp": tp, "pp": 1}}
    path = tmp_path / f"gpt350m-tp{tp}-{micro_batch}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def _step(path: Path, monkeypatch=None):
    if monkeypatch is not None:                 # scalesim's per-kernel count alone
        monkeypatch.setattr(setup, "framework_layer_host_s", lambda *args: 0.0)
    return run(*load_scenario(path), baseline=False)


def test_more_tensor_parallel_ranks_never_lower_a_layers_host_calls():
    # From TP 2 on (at TP 1 the columns' identity copy_to Functions stand where TP 2's async all-reduces are)
    for sp in (False, True):
        for passes in ("forward", "backward"):
            counts = [layer_calls(tp, sp)[passes] for tp in (2, 4, 8, 16)]
            for fewer, more in zip(counts, counts[1:]):
                assert all(more[kind] >= n for kind, n in fewer.items())
    times = [sum(layer_host_s(tp, 13e-6)) for tp in (2, 4, 8, 16)]
    assert times == sorted(times)
    assert sum(layer_host_s(8, 13e-6, True)) > sum(layer_host_s(8, 13e-6))    # SP's gathers and scatters
    assert sum(layer_host_s(8, 26e-6)) == pytest.approx(2 * sum(layer_host_s(8, 13e-6)))   # a slower host


def test_the_count_exceeds_the_per_kernel_count_and_only_for_the_legacy_layer():
    model = get_model("gpt2-350m", seq_len=1024)
    block = next(layer for layer in model.layers if layer.kind == "transformer_block")
    forward, backward, _ = layer_kernels(block, "fused")
    calls = layer_calls(2)
    assert calls["forward"]["aten"] >= forward                   # every kernel the generic count sees, and more
    assert calls["backward"]["aten"] + calls["backward"]["engine"] >= backward

    class Par:
        tp, sequence_parallel = 8, False

    class Host:
        dispatch_us_per_op = None

    assert megatron_layer_host_s(model, Par, "fused", False, Host) > 0
    assert megatron_layer_host_s(model, Par, "fused", True, Host) == 0.0      # CUDA graphs
    assert megatron_layer_host_s(model, Par, "flash", False, Host) == 0.0     # not the legacy layer


def test_a_small_model_at_tensor_parallel_8_and_micro_batch_1_is_host_bound(tmp_path, monkeypatch):
    path = _gpt350m(tmp_path, 8, 1)
    r = _step(path)
    assert r.breakdown.host_bound > 0.2 * r.step_time_s          # the GPU waits for the host
    before = _step(path, monkeypatch)
    assert r.step_time_s > 1.5 * before.step_time_s


def test_big_gemms_are_unaffected(monkeypatch):
    path = SCENARIOS / "megatron-sc21-gpt-18.4B.yaml"
    r = _step(path)
    assert r.breakdown.host_bound < 0.01 * r.step_time_s
    before = _step(path, monkeypatch)
    assert r.step_time_s == pytest.approx(before.step_time_s, rel=0.01)
