"""nanotron's TP all-gather buffers (costs/nanotron_memory.py): two full-sequence activations per TP rank."""

from dataclasses import replace
from pathlib import Path

import pytest

from scalesim.app.setup import prepare
from scalesim.parallel.step import stage_memory
from scalesim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "validation" / "scenarios"


def _setup(name: str):
    scenario, file = load_scenario(SCENARIOS / f"{name}.yaml")
    return prepare(scenario, file)


@pytest.mark.parametrize("name", ["nanotron-8.86b-16node-dp16-tp8-pp1", "nanotron-3.57b-16node-dp32-tp4-pp1"])
def test_a_tp_rank_keeps_two_full_sequence_gather_buffers(name):
    # "allgather" (column linears' inputs) and "allgather2" (row linears' output gradients), each
    # s * b * h elements of the 16-bit type, whatever the TP degree: not divided by it.
    setup = _setup(name)
    model, plan, stage = setup.model, setup.plan, setup.step.stages[0]
    without = stage_memory(model, replace(plan, tp_gather_buffers=0), stage)
    with_buffers = stage_memory(model, plan, stage)
    s, h, b = model.tokens_per_sample, model.hidden, plan.micro_batch
    assert with_buffers.live - without.live == pytest.approx(2 * s * b * h * 2)


def test_no_buffers_without_tensor_parallelism():
    setup = _setup("nanotron-8.86b-8node-dp32-tp1-pp2")
    assert setup.plan.tp_gather_buffers == 2
    stage = setup.step.stages[0]
    assert stage_memory(setup.model, replace(setup.plan, tp_gather_buffers=0), stage) == \
        stage_memory(setup.model, setup.plan, stage)
