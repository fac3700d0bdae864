"""nanotron's decoder layer issues its Python-level calls from the host (scalesim/costs/nanotron_host.py):
with tensor parallelism and one-sequence micro-batches they, not the GPU, set the pace."""

from pathlib import Path

import pytest

import scalesim.app.setup as setup
from scalesim.app.run import run
from scalesim.costs.nanotron_host import layer_calls, layer_host_s
from scalesim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "validation" / "scenarios"


def _step(name: str, monkeypatch=None):
    if monkeypatch is not None:                 # scalesim's per-kernel count alone
        monkeypatch.setattr(setup, "framework_layer_host_s", lambda *args: 0.0)
    return run(*load_scenario(SCENARIOS / f"{name}.yaml"), baseline=False)


def test_more_tensor_parallel_ranks_never_lower_a_layers_host_calls():
    for passes in ("forward", "backward"):
        counts = [layer_calls(tp)[passes] for tp in (1, 2, 4, 8, 16)]
        for fewer, more in zip(counts, counts[1:]):
            assert all(more[kind] >= n for kind, n in fewer.items())
    times = [sum(layer_host_s(tp, 13e-6)) for tp in (1, 2, 4, 8, 16)]
    assert times == sorted(times)
    assert sum(layer_host_s(8, 26e-6)) == pytest.approx(2 * sum(layer_host_s(8, 13e-6)))   # a slower host


def test_a_tensor_parallel_layer_at_micro_batch_one_is_host_bound(monkeypatch):
    r = _step("nanotron-1.34b-1node-dp1-tp8-mbs1")
    assert r.breakdown.host_bound > 0.2 * r.step_time_s          # the GPU waits for the host
    before = _step("nanotron-1.34b-1node-dp1-tp8-mbs1", monkeypatch)
    assert r.step_time_s > 1.2 * before.step_time_s


def test_a_big_micro_batch_is_unaffected(monkeypatch):
    r = _step("nanotron-1.34b-1node-dp2-tp4-mbs16")
    assert r.breakdown.host_bound < 0.01 * r.step_time_s
    before = _step("nanotron-1.34b-1node-dp2-tp4-mbs16", monkeypatch)
    assert r.step_time_s == pytest.approx(before.step_time_s, rel=0.01)
