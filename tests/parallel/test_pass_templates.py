"""Replayed passes (parallel/pass_templates.py) are the very tasks building each pass again gives."""

from pathlib import Path

import pytest

from scalesim.app.setup import prepare
from scalesim.parallel.builder import StepBuilder
from scalesim.parallel.rank_program import RankProgram
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "ddp buckets, every rank": ("8xh100-ddp.yaml", {"training": {"global_batch": 256}}),
    "zero-3 gathers two layers ahead": ("8xh100-ddp.yaml", {"parallel": {"zero": 3}, "training": {"global_batch": 256}}),
    "zero-1 gathers each layer once": ("8xh100-ddp.yaml", {"parallel": {"zero": 1, "overlap_param_gather": True},
                                                          "training": {"global_batch": 256}}),
    "interleaved pipeline, tp with sequence parallelism": (
        "8xh100-ddp.yaml", {"parallel": {"dp": 2, "tp": 2, "pp": 2, "sequence_parallel": True,
                                         "pp_schedule": "interleaved", "virtual_stages": 2}}),
    "context parallel, full recompute, gpipe": (
        "8xh100-ddp.yaml", {"parallel": {"dp": 1, "tp": 2, "cp": 2, "pp": 2, "pp_schedule": "gpipe"},
                            "training": {"activation_checkpointing": "full", "micro_batch": 4}}),
    "experts over ep, overlapped all-to-alls, zero-3": (
        "64xh100-mixtral-8x7b-ep8.yaml", {"parallel": {"moe_overlap": True}, "training": {"global_batch": 256}}),
    "lora adapters on one GPU": ("1x4090-llama2-7b-lora.yaml", {}),
    "fp32 gradient accumulation, tied embeddings over two stages": (
        "../validation/scenarios/nanotron-1.34b-1node-dp4-tp1-pp2.yaml", {}),
    "sequence-parallel all-gathers recomputed in backward": (
        "8xh100-ddp.yaml", {"parallel": {"dp": 4, "tp": 2, "sequence_parallel": True},
                            "training": {"activation_checkpointing": "selective-op", "global_batch": 256}}),
    "two experts per rank: the all-to-all dispatcher's local sorts": (
        "64xh100-mixtral-8x7b-ep8.yaml", {"parallel": {"ep": 4, "moe_dispatcher": "alltoall"},
                                          "training": {"global_batch": 256}}),
    "offloaded weights fetched before every use, every rank": (
        "8xh100-ddp.yaml", {"parallel": {"offload_params": True}, "training": {"global_batch": 256}}),
    "offloaded weights under zero-3, one rank per pipeline stage": (
        "64xh100-llama3-70b.yaml", {"parallel": {"dp": 4, "tp": 2, "pp": 8, "zero": 3, "offload_params": True},
                                    "training": {"micro_batch": 2}}),
    "megatron-deepspeed's host sync in every layer forward and recompute, tp and pp": (
        "8xh100-ddp.yaml", {"parallel": {"dp": 2, "tp": 2, "pp": 2},
                            "training": {"layer_forward_host_sync": True, "activation_checkpointing": "full"}}),
    "hf trainer's loss check after every micro-batch backward, ddp": (
        "8x4090-ddp.yaml", {"training": {"framework": "hf-trainer", "global_batch": 256}}),
}


@pytest.mark.parametrize("name", CASES)
def test_replayed_passes_equal_passes_built_again(name):
    file, changes = CASES[name]
    scenario, path = load_scenario(ROOT / "scenarios" / file)
    setup = prepare(scenario.with_changes(**changes), path)
    step = setup.step
    builder = StepBuilder(step.model, step.gpu, step.topology, step.plan, symmetric=not step.every_rank,
                          chunks=step.chunks, memo=step.memo, orders=tuple(s.order for s in step.stages))
    for rank in builder.simulated[:4]:
        program = RankProgram(builder, rank)
        replayed = program.tasks()
        assert replayed == RankProgram(builder, rank).tasks(templates=False)
        assert program.passes.replayed > 0


@pytest.mark.parametrize("changes", [{}, {"parallel": {"dp": 4, "tp": 2}}, {"parallel": {"zero": 3}}])
def test_ranks_given_the_same_tasks_would_build_the_same_tasks(changes):
    scenario, path = load_scenario(ROOT / "scenarios" / "8xh100-ddp.yaml")
    step = prepare(scenario.with_changes(**changes), path).step
    assert step.every_rank
    program = step.program
    builder = StepBuilder(step.model, step.gpu, step.topology, step.plan, symmetric=False, chunks=step.chunks,
                          memo=step.memo, orders=tuple(s.order for s in step.stages))
    assert len(program.tasks) == 8
    for rank, tasks in program.tasks.items():
        assert tasks == RankProgram(builder, rank).tasks(templates=False)


def test_passes_that_do_not_recur_are_not_recorded():
    """Recording a pass costs more than building it: the first and last backward of each chunk (keyed
    apart) are built, never recorded; a forward is recorded once, for the micro-batches after it."""
    scenario, path = load_scenario(ROOT / "scenarios" / "8xh100-ddp.yaml")
    step = prepare(scenario.with_changes(training={"global_batch": 256}), path).step
    builder = StepBuilder(step.model, step.gpu, step.topology, step.plan, symmetric=not step.every_rank,
                          chunks=step.chunks, memo=step.memo, orders=tuple(s.order for s in step.stages))
    program = RankProgram(builder, builder.simulated[0])
    assert program.tasks() == RankProgram(builder, builder.simulated[0]).tasks(templates=False)
    assert step.plan.micro_batches >= 4
    assert program.passes.known and all(not (last or first) for _, _, last, first in program.passes.known)
