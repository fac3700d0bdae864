"""HF Trainer's NaN/inf loss check (training.framework: hf-trainer, parallel/step_syncs.py): the host waits for
the GPU after every micro-batch's backward, and on the last one for the gradient reductions too."""

from pathlib import Path

import pytest
import yaml

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.parallel.builder import StepBuilder
from scalesim.parallel.rank_program import RankProgram
from scalesim.parallel.step_syncs import NAME
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.scenario import load_scenario

# the hf-trainer preset's keys written out, so that the loss check is the only difference (scenario/frameworks.py)
PRESET = {"elementwise_kernels": "eager", "grad_clip_host_sync": False}


def _scenario(tmp_path, framework: str | None, micro_batches: int, gpus: int = 1, micro_batch: int = 1) -> Path:
    node = "rtx4090-pcie-8" if gpus > 1 else "rtx4090-pcie-4"
    scenario = {"name": f"gpt2-124m x{gpus} {framework}", "cluster": {"node": node, "gpus": gpus},
                "model": "gpt2-124m",
                "training": {"framework": framework, "precision": "bf16", "seq_len": 1024, "optimizer": "adamw",
                             "global_batch": micro_batch * micro_batches * gpus, "micro_batch": micro_batch, **PRESET},
                "parallel": {"dp": gpus}}
    path = tmp_path / f"{framework}-{gpus}-{micro_batches}-{micro_batch}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def _tasks(path: Path) -> tuple:
    step = prepare(*load_scenario(path)).step
    builder = StepBuilder(step.model, step.gpu, step.topology, step.plan, symmetric=not step.every_rank,
                          chunks=step.chunks, memo=step.memo, orders=tuple(s.order for s in step.stages))
    return RankProgram(builder, builder.simulated[0]).tasks()


def _checks(tasks: tuple) -> list[int]:
    return [k for k, task in enumerate(tasks) if task.name == NAME]


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_a_host_sync_closes_every_micro_batch_backward(tmp_path, micro_batches):
    tasks = _tasks(_scenario(tmp_path, "hf-trainer", micro_batches))
    checks = _checks(tasks)
    assert len(checks) == micro_batches
    backwards = [k for k, task in enumerate(tasks) if isinstance(task, ComputeTask) and task.kind == "backward"]
    forwards = [k for k, task in enumerate(tasks) if isinstance(task, ComputeTask) and task.kind == "forward"]
    for n, k in enumerate(checks):
        assert tasks[k].host_sync and tasks[k].host_s > 0      # isnan / isinf issued, then the wait
        # after its micro-batch's last backward task, before the next micro-batch's first forward task
        last_backward = max(b for b in backwards if b < k)
        assert last_backward in tasks[k].deps
        assert all(f < k for f in forwards[:(n + 1) * len(forwards) // micro_batches])
        assert all(f > k for f in forwards[(n + 1) * len(forwards) // micro_batches:])


def test_without_the_framework_the_step_has_no_loss_check(tmp_path):
    path = _scenario(tmp_path, None, 4)
    assert not prepare(*load_scenario(path)).step.plan.loss_check_host_sync
    assert _checks(_tasks(path)) == []


def test_the_last_check_waits_for_the_gradient_reductions(tmp_path):
    tasks = _tasks(_scenario(tmp_path, "hf-trainer", 2, gpus=8))
    first, last = _checks(tasks)
    reductions = [k for k, task in enumerate(tasks) if isinstance(task, CollectiveTask) and k < last]
    assert reductions and set(reductions) <= set(tasks[last].deps)
    assert not any(isinstance(tasks[d], CollectiveTask) for d in tasks[first].deps)   # no_sync: nothing reduced yet


def test_the_checks_never_shorten_the_step_and_cost_more_the_more_micro_batches(tmp_path):
    def gap(micro_batches: int) -> float:
        checked, plain = (run(*load_scenario(_scenario(tmp_path, f, micro_batches)), baseline=False)
                          for f in ("hf-trainer", None))
        assert checked.breakdown.compute == pytest.approx(plain.breakdown.compute)   # the same GPU work
        return checked.step_time_s - plain.step_time_s
    few, many = gap(2), gap(8)
    assert 0 < few < many
