"""A scenario's `parallel.tp_comm_overlap`: Transformer Engine's userbuffers TP overlap (parallel/tp_overlap.py)."""

from __future__ import annotations

from typing import Literal

import pydantic

from scalesim.schema import Strict


class TpCommOverlapSpec(Strict):
    """NeMo's `ub_tp_comm_overlap_cfg` as far as the simulation uses it: reduce-scatter chunks
    (proj_fprop / fc2_fprop `num_splits`, or ring_exchange: tp chunks) and each overlapped reduce-scatter's `num_sm`.
    Defaults: Transformer Engine's (v1.9 `initialize_ub`)."""

    num_splits: pydantic.PositiveInt = 4
    proj_fprop_sms: pydantic.PositiveInt = 16
    fc2_fprop_sms: pydantic.PositiveInt = 16
    qkv_wgrad_sms: pydantic.PositiveInt = 16
    fc1_wgrad_sms: pydantic.PositiveInt = 16
    # qkv_dgrad / fc1_dgrad `num_sm`: the bulk all-gather of each half's input for its weight gradient
    qkv_dgrad_sms: pydantic.PositiveInt = 16
    fc1_dgrad_sms: pydantic.PositiveInt = 16
    proj_fprop_method: Literal["pipeline", "ring_exchange"] = "pipeline"
    fc2_fprop_method: Literal["pipeline", "ring_exchange"] = "pipeline"
    # proj_fprop / fc2_fprop `set_sm_margin`: their GEMM chunks launched on the SMs the reduce-scatter leaves
    sm_margin: bool = False


def tp_comm_overlap_needs_sp(value, info: pydantic.ValidationInfo):
    """TE overlaps the sequence-parallel all-gathers and reduce-scatters: it needs sequence parallelism."""
    if value is not False and info.data.get("tp", 1) > 1 and not info.data.get("sequence_parallel"):
        raise ValueError("Transformer Engine's TP communication overlap works on sequence-parallel "
                         "collectives: tp_comm_overlap needs sequence_parallel: true (allowed without it: false)")
    if value is not False and info.data.get("sequence_parallel_layout") == "batch-first":
        raise ValueError("Transformer Engine's TP communication overlap works on Megatron's (s, b, h) layout: "
                         "tp_comm_overlap needs sequence_parallel_layout: seq-first (allowed with batch-first: false)")
    return TpCommOverlapSpec() if value is True else value


def tp_async_needs_sp(value: bool, info: pydantic.ValidationInfo) -> bool:
    """nanotron's async TP linears are its REDUCE_SCATTER mode: sequence parallelism on (s, b, h), NCCL calls."""
    data = info.data
    if value and data.get("tp", 1) > 1 and not (data.get("sequence_parallel")
                                              and data.get("sequence_parallel_layout") == "seq-first"
                                              and not data.get("tp_comm_overlap")):
        raise ValueError("nanotron's async TP linears overlap its sequence-parallel collectives: "
                         "tp_linear_async_communication needs sequence_parallel: true, sequence_parallel_layout: "
                         "seq-first and tp_comm_overlap: false (allowed otherwise: false)")
    return value
