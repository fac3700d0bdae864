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
    ring = _cp_calls(_setup("llama3-8b"))
    assert len(ring) == 2 * 32 and {op for op, _ in ring} == {"all_gather"}


def test_the_rings_backward_passes_dk_dv_with_k_and_v():
    """Transformer Engine's ring backward (AttnFuncWithCPAndKVP2P.backward) sends K/V and the accumulated
    dK/dV, both in K/V's dtype, cp - 1 chunks of each: twice what the forward ring moves, block by block."""
    kv = _kv_bytes(8, 128, 8192)
    ring = _cp_calls(_setup("llama3-8b"))
    assert ring[:32] == [("all_gather", kv)] * 32                 # forward: K and V
    assert ring[32:] == [("all_gather", 2 * kv)] * 32             # backward: K, V, dK, dV


def test_more_ring_bytes_never_make_a_step_faster(monkeypatch):
    """Across nodes (CP 2 over the network, one GPU a node), where the ring outlasts the kernels: the
    backward's dK/dV make the step slower than a ring carrying K and V alone (strictly: an exchange whose
    bytes did not reach the step would pass a `>=`)."""
    from scalesim.parallel import cp_exchange

    def across(**parallel):
        return prepare(Scenario.model_validate({
            "name": "cp", "cluster": {"node": "dgx-h100", "nodes": 2, "fabric": {"link": "ib-hdr", "nics_per_node": 1}},
            "model": "llama3-8b",
            "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
            "parallel": {"cp": 2, "tp": 8, **parallel}}))

    real = simulate_setup(across()).end_s
    monkeypatch.setattr(cp_exchange, "ring_bytes", lambda cp_bytes, kind: cp_bytes)
    kv_only = simulate_setup(across()).end_s
    assert real > kv_only


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


@pytest.mark.parametrize("cp", [2, 4])
def test_the_all_gathers_full_sequence_buffers_raise_the_peak_over_the_rings(cp):
    """TE's all-gather backward holds the gathered K and V and full-length dK, dV (one layer's at a time):
    four full-sequence tensors of kv_heads x head_dim, 16-bit, more than the ring's peak."""
    seq = 16384
    ring = _setup("llama3-8b", cp=cp, seq=seq, cp_comm_type="p2p").step.memory
    gathered = _setup("llama3-8b", cp=cp, seq=seq, cp_comm_type="all_gather").step.memory
    assert gathered.total >= ring.total
    assert gathered.activations - ring.activations >= 4 * seq * 8 * 128 * 2


def test_torchs_ring_gathers_every_query_heads_kv_and_hops_fp32_gradients_on_the_compute_path():
    """PyTorch's ring as torchtitan runs it (parallel/torch_ring.py): an all-gather of K and V with every query
    head (SDPA after repeat_kv) in forward and again in backward, the half waiting for it, and in backward CP
    hops of the rank's fp32 dK and dV, each waited before the next."""
    cp, seq = 4, 16384
    tasks = _setup("llama3-8b", cp=cp, seq=seq, cp_comm_type="torch_ring").step.program.tasks[0]
    calls = [(i, t) for i, t in enumerate(tasks) if isinstance(t, CollectiveTask) and t.key.startswith("cp/")]
    gathers = [t for _, t in calls if t.plan.op == "all_gather"]
    hops = [t for _, t in calls if t.plan.op == "send_recv"]
    assert len(gathers) == 2 * 32 and {t.plan.size_bytes for t in gathers} == {_kv_bytes(32, 128, seq)}
    assert len(hops) == cp * 32 and {t.plan.size_bytes for t in hops} == {_kv_bytes(32, 128, seq) / cp * 4 / 2}
    first = calls[0][0]
    half = next(t for t in tasks[first + 1:] if isinstance(t, ComputeTask) and t.name.startswith("fwd"))
    assert first in half.deps
    hop_ids = [i for i, t in calls if t.plan.op == "send_recv"]
    assert all(tasks[b].deps == (a,) for a, b in zip(hop_ids[:cp - 1], hop_ids[1:cp]))


def test_torchs_exposed_ring_never_makes_a_step_faster_than_transformer_engines():
    ring = simulate_setup(_setup("llama3-8b", cp=4, seq=16384)).end_s
    torch = simulate_setup(_setup("llama3-8b", cp=4, seq=16384, cp_comm_type="torch_ring")).end_s
    assert torch > ring
