"""The optimizer update: a memory-bound pass over each parameter's state, bytes by optimizer."""

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s
from scalesim.costs.optimizer import optimizer_bytes_per_param, optimizer_time_s
from scalesim.hardware import get_gpu

H100 = get_gpu("h100-sxm")


def test_optimizer_step_is_memory_bound_streaming():
    params = 1e9
    t = optimizer_time_s(params, H100, "bf16") - KERNEL_OVERHEAD_S
    assert t == pytest.approx(params * 28 / streaming_bw_bytes_per_s(H100))


def test_optimizer_none_runs_no_update_and_keeps_no_state():
    from scalesim.costs.memory import state_bytes_per_param
    assert optimizer_time_s(1e9, H100, "fp32", "none") == 0.0 < optimizer_time_s(1e9, H100, "fp32", "sgd")
    assert state_bytes_per_param("fp32", "none")[2] == 0.0


def test_mixed_precision_sgd_streams_the_fp32_master_and_momentum_the_memory_model_keeps():
    """Mixed-precision SGD keeps an fp32 master and fp32 momentum (costs/memory.py), so its update
    moves as many bytes as fp32 SGD, and one fp32 state read and write (8 B) less than Adam."""
    from scalesim.costs.memory import state_bytes_per_param
    for precision in ("fp16", "bf16"):
        assert optimizer_bytes_per_param(precision, "sgd") == optimizer_bytes_per_param("fp32", "sgd")
        assert optimizer_bytes_per_param(precision, "adamw") - optimizer_bytes_per_param(precision, "sgd") == 8.0
        _, grad, state = state_bytes_per_param(precision, "sgd")
        assert optimizer_bytes_per_param(precision, "sgd") >= 2 * state + grad
