"""nanotron's TP all-gather buffers (costs/nanotron_memory.py): two full-sequence activations per TP rank."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from scalesim.app.setup import prepare
from scalesim.errors import InputError
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


def _with(tmp_path, name: str, **parallel):
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    data["parallel"].update(parallel)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    scenario, file = load_scenario(path)
    return prepare(scenario, file)


def test_saving_the_gathered_inputs_keeps_whole_sequences(tmp_path):
    # tp_recompute_allgather false: every column linear (QKV and gate/up in each block, the head) saves the
    # gathered (s, b, h) input, not its 1/t shard, and the column linears' MemoryBuffer entry goes unused.
    name = "nanotron-8.86b-16node-dp16-tp8-pp1"
    base, kept = _setup(name), _with(tmp_path, name, tp_recompute_allgather=False)
    model, t = base.model, base.plan.placement.tp
    full = 2 * model.tokens_per_sample * base.plan.micro_batch * model.hidden     # one (s, b, h) bf16 tensor
    inputs = 2 * model.num_layers + 1
    grown = kept.step.first_stage_memory.live - base.step.first_stage_memory.live
    assert grown == pytest.approx(inputs * (1 - 1 / t) * full - full)


def test_saving_gathered_inputs_needs_sequence_parallelism(tmp_path):
    with pytest.raises(InputError) as err:
        _with(tmp_path, "nanotron-8.86b-8node-dp32-tp1-pp2", tp_recompute_allgather=False)
    assert err.value.key == "parallel.tp_recompute_allgather"
