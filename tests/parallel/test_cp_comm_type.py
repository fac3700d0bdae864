"""Context parallelism's K/V exchange: Transformer Engine's p2p ring or its all-gather (parallel/cp_exchange.py)."""

import pytest

from scalesim.app.setup import prepare, simulate_setup
from scalesim.errors import InputError
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.scenario import Scenario


def _setup(model, cp=2, seq=8192, **parallel):
    return prepare(Scenario.model_validate({
        "name": "cp", "cluster": {"node": "dgx-h100", "gpus": cp}, "model": model,
        "training": {"precision": "bf16", "seq_len": seq, "global_batch": 1, "micro_batch": 1},
        "parallel": {"cp": cp, **parallel}}))


def _cp_calls(setup):
    """(op, bytes) of rank 0's context-parallel collectives, in order."""
    return [(t.plan.op, t.plan.size_bytes) for t in setup.step.program.tasks[0]
            if isinstance(t, CollectiveTask) and t.key.startswith("cp/")]


def _kv_bytes(kv_heads, head_dim, seq):
    """K and V of the whole sequence, 16-bit, one sample: what every rank ends up holding."""
    return 2 * seq * kv_heads * head_dim * 2


@pytest.mark.parametrize("model, blocks, kv_heads, head_dim", [("gemma2-9b", 42, 8, 256), ("gemma2-27b", 46, 16, 128)])
def test_with_windows_every_block_all_gathers_kv_and_reduce_scatters_their_gradients(model, blocks, kv_heads, head_dim):
    """Gemma 2 under CP runs Transformer Engine's all-gather in every layer, its global ones too (one
    cp_comm_type for the model): forward gathers K and V of the whole sequence, backward gathers them again and
    reduce-scatters dK and dV (AttnFuncWithCPAndKVAllGather), each the config's kv_heads x head_dim wide."""
    calls = _cp_calls(_setup(model))
    kv = _kv_bytes(kv_heads, head_dim, 8192)
    assert calls.count(("all_gather", kv)) == 2 * blocks
    assert calls.count(("reduce_scatter", kv)) == blocks
    assert len(calls) == 3 * blocks
    # without windows, the ring: K and V once a pass, no gradient reduce-scatter
    assert _cp_calls(_setup("llama3-8b")) == [("all_gather", _kv_bytes(8, 128, 8192))] * (2 * 32)


def test_the_all_gather_is_exposed_and_the_ring_is_not():
    """TE: "KV all-gather between CP ranks is exposed": the attention half waits for it; the ring's exchange
    runs beside the half, which starts with it."""
    for comm, exposed in (("all_gather", True), ("p2p", False)):
        setup = _setup("llama3-8b", cp_comm_type=comm)
        tasks = setup.step.program.tasks[0]
        gather = next(i for i, t in enumerate(tasks) if isinstance(t, CollectiveTask) and t.key.startswith("cp/"))
        half = next(t for t in tasks[gather + 1:] if isinstance(t, ComputeTask) and t.name.startswith("fwd"))
        assert (gather in half.deps) is exposed


def test_an_all_gather_run_of_a_model_without_windows_pays_its_exposed_exchange():
    ring = simulate_setup(_setup("llama3-8b", cp=4, seq=16384)).end_s
    gathered = simulate_setup(_setup("llama3-8b", cp=4, seq=16384, cp_comm_type="all_gather")).end_s
    assert gathered > ring


def test_p2p_with_sliding_windows_is_refused_as_transformer_engine_refuses_it():
    with pytest.raises(InputError) as err:
        _setup("gemma2-9b", cp_comm_type="p2p")
    assert err.value.key == "parallel.cp_comm_type" and "all_gather" in str(err.value)
