"""The host-bound attribution (app/host_causes.py) reads causes from how the builder names its tasks: a
task renamed in parallel/ must break this test, not silently move host time to another cause in the report.
FSDP's own tasks are found without their names, as the tasks an FSDP step has that the same step under
DeepSpeed ZeRO-3 (no FSDP kernels or hooks) has not; layer tasks must name a part of the model."""

from collections import Counter
from pathlib import Path

import pytest

from scalesim.app.host_causes import eager_parts, host_causes, part_name, task_cause
from scalesim.app.setup import prepare
from scalesim.parallel.sharding import split_moe
from scalesim.program import ComputeTask
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
TINY = {"seq_len": 64, "micro_batch": 1, "global_batch": 8}


def rank0(scenario_file: str, **changes):
    scenario, file = load_scenario(ROOT / "scenarios" / scenario_file)
    setup = prepare(scenario.with_changes(**changes), file)
    return setup, setup.step.program.tasks[min(setup.step.program.tasks)]


def fsdp_only(fsdp_tasks, deepspeed_tasks):
    """The tasks of an FSDP step that the DeepSpeed ZeRO-3 step has no task of that name for."""
    plain = {t.name for t in deepspeed_tasks}
    return [t for t in fsdp_tasks if t.name not in plain]


def misattributed(tasks, cause):
    return sorted({t.name for t in tasks if task_cause(t) != cause})


@pytest.fixture(scope="module")
def zero3_steps():
    return {version: rank0("8xa100-ddp.yaml", parallel={"zero": 3, "fsdp_version": version}, training=TINY)[1]
            for version in (1, 2, None)}


@pytest.mark.parametrize("version", [1, 2])
def test_every_task_fsdp_adds_is_attributed_to_fsdp_and_none_of_deepspeeds(zero3_steps, version):
    own = fsdp_only(zero3_steps[version], zero3_steps[None])
    assert own and sum(t.host_s for t in own) > 0
    assert misattributed(own, "fsdp") == []
    assert not [t.name for t in zero3_steps[None] if task_cause(t) == "fsdp"]


def test_fsdp1_rate_limiter_waits_are_every_host_sync_fsdp1_adds(zero3_steps):
    waits = sum(t.host_sync for t in fsdp_only(zero3_steps[1], zero3_steps[None]))
    assert waits > 0
    assert host_causes(zero3_steps[1], False, 1)["blocking_syncs"]["fsdp_rate_limiter"] == waits
    assert host_causes(zero3_steps[2], False, 2)["blocking_syncs"]["fsdp_rate_limiter"] == 0   # FSDP2: no limiter


def test_a_renamed_fsdp_task_is_caught():
    renamed = [ComputeTask("fully_shard forward hooks", "other", 0.0, host_s=1e-5)]
    assert misattributed(fsdp_only(renamed, []), "fsdp") == ["fully_shard forward hooks"]


def test_every_layer_task_of_a_moe_step_names_a_part_of_the_model_and_every_eager_part_is_found():
    setup, tasks = rank0("64xh100-mixtral-8x7b-ep8.yaml")
    model = setup.model
    parts = ({layer.name for layer in model.layers}
             | {f"{layer.name}.{i}" for layer in model.layers if layer.expert_params > 0
                for i in range(len(split_moe(layer)))})
    layer_tasks = [t for t in tasks if task_cause(t) == "layer_kernels"]
    named = Counter(part_name(t.name) for t in layer_tasks)
    assert layer_tasks and set(named) <= parts, sorted(set(named) - parts)
    assert eager_parts(model) and eager_parts(model) <= set(named)
    assert all(t.kind in ("forward", "backward", "recompute") for t in layer_tasks)
    assert misattributed([t for t in tasks if t.kind in ("comm", "optimizer")], "other") == []
