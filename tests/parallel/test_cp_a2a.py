"""Context parallelism's all-to-all form, Transformer Engine's AttnFuncWithCPAndQKVOA2A (parallel/cp_a2a.py)."""

import pytest

from scalesim.app.setup import prepare, simulate_setup
from scalesim.collectives.busbw import bus_factor
from scalesim.errors import InputError
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.scenario import Scenario

SEQ = 16384
LAYERS, HEADS, KV_HEADS, HEAD_DIM = 32, 32, 8, 128        # Llama 3 8B's config


def _setup(cp=4, model="llama3-8b", gpus=None, **parallel):
    return prepare(Scenario.model_validate({
        "name": "cp", "cluster": {"node": "dgx-h100", "gpus": gpus or cp}, "model": model,
        "training": {"precision": "bf16", "seq_len": SEQ, "global_batch": 1, "micro_batch": 1},
        "parallel": {"cp": cp, **parallel}}))


def _cp_calls(setup):
    return [(i, t) for i, t in enumerate(setup.step.program.tasks[0])
            if isinstance(t, CollectiveTask) and t.key.startswith("cp/")]


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_each_pass_moves_the_local_q_k_v_and_o_bytes_times_cp_minus_one_over_cp(cp):
    """Forward all-to-alls the rank's Q, K, V (seq/cp tokens) to heads/cp and O back; backward dO, then dQ, dK,
    dV: per block and pass the local Q, K, V and O bytes, of which (cp - 1)/cp leave the rank."""
    calls = [t for _, t in _cp_calls(_setup(cp, cp_comm_type="a2a"))]
    assert calls and all(t.plan.op == "all_to_all" for t in calls)
    tokens = SEQ // cp
    q, kv = tokens * HEADS * HEAD_DIM * 2, tokens * KV_HEADS * HEAD_DIM * 2       # 16-bit
    per_pass = 2 * q + 2 * kv                                                      # Q, K, V, O (dO, dQ, dK, dV)
    sent = sum(t.plan.size_bytes * bus_factor("all_to_all", cp) for t in calls)
    assert sent == pytest.approx(2 * LAYERS * per_pass * (cp - 1) / cp)            # forward and backward


def test_the_attention_half_waits_for_the_all_to_all():
    """TE waits for the Q, K, V exchange (`current_stream().wait_stream(cp_stream)`) before its kernel."""
    setup = _setup(cp_comm_type="a2a")
    tasks = setup.step.program.tasks[0]
    calls = _cp_calls(setup)
    last_in = calls[2][0]                        # Q, K, V: three all-to-alls, the half after the third
    half = next(t for t in tasks[last_in + 1:] if isinstance(t, ComputeTask) and t.name.startswith("fwd"))
    assert last_in in half.deps


def test_a2a_with_cp_1_is_no_context_parallelism():
    plain = _setup(cp=1, gpus=1)
    a2a = _setup(cp=1, gpus=1, cp_comm_type="a2a")
    assert not _cp_calls(a2a)
    assert simulate_setup(a2a).end_s == simulate_setup(plain).end_s


def test_more_cp_bandwidth_never_slows_it():
    times = [simulate_setup(_setup(cp_comm_type="a2a", nccl_max_ctas={"cp": ctas})).end_s for ctas in (1, 2, 8)]
    assert times[0] >= times[1] >= times[2]
    assert times[0] > times[2]


def test_heads_not_divisible_by_cp_are_refused():
    # Qwen2.5 7B's 28 heads and 4 KV heads cannot be split over 8 CP ranks (TE asserts num_heads % cp_size == 0)
    with pytest.raises(InputError) as err:
        _setup(cp=8, model="qwen2.5-7b", cp_comm_type="a2a")
    assert err.value.key == "parallel.cp_comm_type" and "p2p" in str(err.value) and "[2, 4]" in str(err.value)
    _setup(cp=4, model="qwen2.5-7b", cp_comm_type="a2a")


def test_a_window_runs_on_the_all_to_all():
    """TE's a2a path takes sliding windows (FusedAttention, FlashAttention >= 2.3), unlike its p2p ring."""
    setup = _setup(cp=2, model="gemma2-9b", cp_comm_type="a2a")
    assert {t.plan.op for _, t in _cp_calls(setup)} == {"all_to_all"}
