"""Megatron's legacy GPT layer issues its Python-level calls from the host (scalesim/costs/megatron_host.py):
with tensor parallelism and small micro-batches of a small model they, not the GPU, set the pace; big GEMMs
hide them."""

from pathlib import Path

import pytest
import yaml

import scalesim.app.setup as setup
import scalesim.costs.megatron_host as megatron_host
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


def _mds_flash(tmp_path, **training) -> Path:
    """gpt2-350m at TP 4, micro-batch 1, flash attention (8x A100)."""
    scenario = {"name": "gpt350m-flash", "cluster": {"node": "dgx-a100", "nodes": 1}, "model": "gpt2-350m",
                "training": {"precision": "fp16", "seq_len": 1024, "global_batch": 8, "micro_batch": 1,
                             "attention": "flash", **training},
                "parallel": {"dp": 2, "tp": 4, "pp": 1}}
    path = tmp_path / f"flash-{len(training)}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def test_megatron_deepspeed_with_flash_attention_pays_the_legacy_layers_host_calls(tmp_path, monkeypatch):
    # --use-flash-attn runs the same ParallelTransformerLayer: its linears, norms and regions cost the host
    # as much as with the fused softmax
    path = _mds_flash(tmp_path, framework="megatron-deepspeed")
    r = _step(path)
    assert r.breakdown.host_bound > 0
    assert r.step_time_s > _step(path, monkeypatch).step_time_s


def test_flash_attention_without_a_framework_is_not_priced_as_the_legacy_layer(tmp_path, monkeypatch):
    path = _mds_flash(tmp_path)
    priced = _step(path)
    monkeypatch.setattr(megatron_host, "megatron_layer_host_s", lambda *args: 0.0)
    assert _step(path) == priced                       # the same result as with no legacy-layer pricing at all
    model = get_model("gpt2-350m", seq_len=1024)

    class Par:
        tp, sequence_parallel = 4, False

    class Host:
        dispatch_us_per_op = None

    for attention in ("flash", "flash2", "triton"):
        assert megatron_layer_host_s(model, Par, attention, False, Host) == 0.0
        assert megatron_layer_host_s(model, Par, attention, False, Host, "megatron-core") == 0.0
        assert megatron_layer_host_s(model, Par, attention, False, Host, "megatron-deepspeed") > 0
        assert megatron_layer_host_s(model, Par, attention, True, Host, "megatron-deepspeed") == 0.0
    assert megatron_layer_host_s(model, Par, "te-unfused", False, Host, "megatron-deepspeed") == 0.0


def test_flash_attention_issues_fewer_engine_kernels_and_module_calls_than_the_fused_softmax():
    # FlashSelfAttention: one kernel call each way for baddbmm + softmax + dropout + bmm, but einops'
    # rearrange copies around it (tr.py:836, :846) and cu_seqlens' arange (tr.py:417)
    for tp in (1, 2, 8):
        for sp in (False, True):
            fused, flash = layer_calls(tp, sp, "fused"), layer_calls(tp, sp, "flash")
            assert flash["forward"]["aten"] > fused["forward"]["aten"]
            assert flash["forward"]["view"] < fused["forward"]["view"]
            assert flash["backward"]["engine"] < fused["backward"]["engine"]
            assert flash["backward"]["view"] > fused["backward"]["view"]       # the Function's allocations
            for passes in ("forward", "backward"):
                for kind in ("function", "collective"):
                    assert flash[passes][kind] == fused[passes][kind]
            assert layer_calls(tp, sp, "triton")["backward"]["triton"] == 2   # preprocess and backward kernels
    # SP skips the RNG tracker's fork (3 calls) around either core attention (tr.py:322-325, :839-843) and
    # adds its 6 buffer and contiguous calls elsewhere in the layer
    for attention in ("fused", "flash", "triton"):
        assert layer_calls(8, True, attention)["forward"]["view"] == layer_calls(8, False, attention)["forward"]["view"] + 3
