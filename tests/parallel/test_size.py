"""The task estimate behind the answer budget (scalesim/parallel/size.py) against built programs.

The budget refuses plans before building them, so the estimate must never fall below
the program the builder then makes (else a refused-in-time plan could run long), and
must stay close to it (else plans that would answer in time are refused).
"""

from pathlib import Path

import pytest

from scalesim.app.setup import prepare
from scalesim.parallel.size import compiled_tasks
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SMALL_FACTOR = 2.0

PLANS = [
    # (scenario, changes): every rank (DDP buckets), interleaved virtual stages with TP and
    # sequence parallelism, context parallelism, MoE expert parallelism, ZeRO-3, offloaded
    # weights, full and selective recompute.
    ("scenarios/8x4090-ddp.yaml", {}),
    ("scenarios/8x4090-ddp.yaml", {"parallel": {"zero": 3}, "training": {"activation_checkpointing": "full"}}),
    ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 64}}),
    ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 64}, "parallel": {"virtual_stages": 10}}),
    ("scenarios/64xh100-mixtral-8x22b-ep8.yaml", {"training": {"global_batch": 64}}),
    ("scenarios/64xh100-mixtral-8x7b-ep8.yaml", {"parallel": {"offload_params": True}}),
    # PyTorch FSDP's own kernels beside ZeRO-3's gathers and reductions (parallel/fsdp.py)
    ("scenarios/8x4090-ddp.yaml", {"parallel": {"zero": 3, "fsdp_version": 2}}),
    # Megatron-Core's "moe" recompute module replays MoE layers whole
    ("validation/scenarios/dgxc-deepseek-v3-bf16-1024xh100-pp8.yaml", {"training": {"global_batch": 1024}}),
    # torchtitan's per-op selective recompute gathers the sequence-parallel inputs again, with layout copies
    ("validation/scenarios/torchtitan-2506-llama3.1-8b-fsdp8-tp8-compile.yaml", {}),
    ("validation/scenarios/torchtitan-2506-llama3.1-8b-fsdp8-tp8-compile.yaml",
     {"parallel": {"sequence_parallel_layout": "seq-first"}}),
    ("scenarios/8x4090-ddp.yaml", {"parallel": {"zero": 3, "fsdp_version": 1}}),
    # HF Trainer's loss check a micro-batch (parallel/step_syncs.py)
    ("scenarios/8x4090-ddp.yaml", {"training": {"framework": "hf-trainer", "global_batch": 512}}),
    ("scenarios/64xh100-mixtral-8x7b-ep8.yaml", {"parallel": {"fsdp_version": 2}}),
    ("scenarios/2x4090-llama2-70b-qlora.yaml", {}),
    ("validation/scenarios/dgxc-llama3.1-405b-bf16-96gpu.yaml", {"training": {"global_batch": 24}}),
    # Transformer Engine's TP overlap (parallel/tp_overlap.py): its halves' extra chunks and calls
    ("validation/scenarios/dgxc-llama3.1-405b-bf16-96gpu.yaml",
     {"training": {"global_batch": 24}, "parallel": {"tp_comm_overlap": True}}),
    ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 64, "activation_checkpointing": "full"},
                                           "parallel": {"tp_comm_overlap": True}}),
    ("validation/scenarios/mbridge-qwen3-30b-a3b-fp8-16xh100.yaml", {"training": {"global_batch": 64}}),
    ("validation/scenarios/mbridge-qwen3-30b-a3b-fp8-16xh100.yaml",
     {"training": {"global_batch": 64, "activation_checkpointing": "selective"}}),
    # MLA under TP and SP: its latent all-gathers and reduce-scatters (parallel/mla_tp.py)
    ("validation/scenarios/dgxc-deepseek-v3-bf16-128xgb200.yaml", {"training": {"global_batch": 64}}),
    ("validation/scenarios/dgxc-deepseek-v3-bf16-128xgb200.yaml",
     {"training": {"global_batch": 32, "activation_checkpointing": "full", "recompute_modules": None}}),
    # Megatron-Core's one-tensor buckets, each NaN-checked, cut into per-rank views and gathered on its own
    ("validation/scenarios/mlperf51-cisco-128xh100-llama31-8b-gb64.yaml", {}),
    ("validation/scenarios/mlperf51-cisco-128xh100-llama31-8b-gb64.yaml",
     {"parallel": {"align_param_gather": False, "overlap_param_gather": False}}),
]


@pytest.mark.parametrize("path, changes", PLANS, ids=[f"{Path(p).stem}{'+' if c else ''}" for p, c in PLANS])
def test_the_estimate_bounds_the_built_program_from_above_and_closely(path, changes):
    s, file = load_scenario(ROOT / path)
    setup = prepare(s.with_changes(**changes) if changes else s, file)
    built = sum(len(tasks) for tasks in setup.step.program.tasks.values())
    estimate = compiled_tasks(setup.step)
    assert built <= estimate <= SMALL_FACTOR * built, (built, estimate)


def test_virtual_stages_multiply_the_pipeline_messages_in_the_estimate():
    s, file = load_scenario(ROOT / "scenarios" / "64xh100-llama3-70b.yaml")
    steps = [prepare(s.with_changes(training={"global_batch": 64}, parallel={"virtual_stages": v}), file).step
             for v in (1, 5, 10)]
    built = [sum(len(t) for t in step.program.tasks.values()) for step in steps]
    estimates = [compiled_tasks(step) for step in steps]
    assert built[0] < built[1] < built[2] and estimates[0] < estimates[1] < estimates[2]
