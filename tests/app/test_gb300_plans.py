"""GB300 against GB200 at the same plan: Blackwell Ultra runs GB200's kernels (same SMs, same cuBLAS
kernels, same top clock) under a 1400 W limit instead of 1200 W; its GEMMs run at the rates NVIDIA's
aiconfigurator tables measure (above GB200's), and a GB300 plan is never slower than the same GB200 plan."""

from __future__ import annotations

import pytest

from scalesim.app.setup import prepare, step_time_of
from scalesim.costs.compute import achieved_peak_flop_per_s
from scalesim.hardware import get_gpu
from scalesim.scenario import Scenario

GB200, GB300 = get_gpu("gb200"), get_gpu("gb300")


def test_gb300_gemms_run_above_gb200s_at_the_same_peaks():
    # NVIDIA's aiconfigurator tables measure GB300 above GB200 on large GEMMs in both precisions
    # (tests/hardware/test_aiconfigurator_gemms.py holds the figures); per clock the parts are the same
    for precision in ("bf16", "fp8"):
        assert achieved_peak_flop_per_s(GB300, precision) > achieved_peak_flop_per_s(GB200, precision)
    assert GB300.bf16_flop_per_s == GB200.bf16_flop_per_s and GB300.sms == GB200.sms
    # and the GB200 entry keeps its own measurements
    assert GB200.gemm_efficiency == 0.729 and GB200.fp8_gemm_efficiency == 0.723


def _scenario(node: str, gpus: int, model: str, training: dict, parallel: dict) -> Scenario:
    return Scenario.model_validate({"name": f"{node}-plan", "cluster": {"node": node, "gpus": gpus},
                                    "model": model, "training": training, "parallel": parallel})


PLANS = {
    "bf16-dp": (8, "llama3.2-1b", {"precision": "bf16", "seq_len": 2048, "global_batch": 16, "micro_batch": 2},
                {"dp": 8}),
    "fp8-cp2": (8, "llama3-8b", {"precision": "fp8", "seq_len": 8192, "global_batch": 4, "micro_batch": 1,
                                 "attention": "flash", "cuda_graphs": True},
                {"dp": 4, "cp": 2, "zero": 1, "overlap_param_gather": True}),
    "fp8-tp2-sp": (8, "llama3-8b", {"precision": "fp8", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
                   {"dp": 4, "tp": 2, "sequence_parallel": True}),
    "fp8-lora-cp8": (8, "llama2-70b", {"precision": "fp8", "seq_len": 8192, "global_batch": 1, "micro_batch": 1,
                                       "fp8_attention": True, "finetune": "lora",
                                       "lora": {"rank": 16, "targets": "attention", "layout": "megatron"}},
                     {"cp": 8, "cp_comm_type": "a2a"}),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_gb300_plan_is_never_slower_than_the_same_gb200_plan(name):
    gpus, model, training, parallel = PLANS[name]
    times = {node: step_time_of(prepare(_scenario(node, gpus, model, training, parallel)))
             for node in ("gb200-nvl72", "gb300-nvl72")}
    assert times["gb300-nvl72"] < times["gb200-nvl72"], times
