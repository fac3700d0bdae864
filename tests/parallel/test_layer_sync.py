"""Megatron-DeepSpeed's `torch.tensor(0.0, device=...)` in every layer forward (training.layer_forward_host_sync,
parallel/layer_sync.py): the host waits for the GPU once a layer forward, so it cannot run ahead across layers."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.parallel.builder import StepBuilder
from scalesim.parallel.layer_sync import FIRST_KERNEL, SYNCED, TENSOR_CALLS
from scalesim.parallel.rank_program import RankProgram
from scalesim.program import ComputeTask
from scalesim.scenario import load_scenario

LAYERS = 24     # gpt2-350m


def _scenario(tmp_path, model: str, tp: int, micro_batch: int, seq_len: int = 1024, **training) -> Path:
    scenario = {"name": f"{model}-tp{tp}", "cluster": {"node": "dgx-a100", "nodes": 1}, "model": model,
                "training": {"precision": "fp16", "seq_len": seq_len, "global_batch": 4 * micro_batch * (8 // tp),
                             "micro_batch": micro_batch, "attention": "fused", **training},
                "parallel": {"dp": 8 // tp, "tp": tp, "pp": 1}}
    path = tmp_path / f"{model}-{tp}-{micro_batch}-{len(training)}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def _steps(tmp_path, model: str, tp: int, micro_batch: int, **kw):
    return [run(*load_scenario(_scenario(tmp_path, model, tp, micro_batch, layer_forward_host_sync=key, **kw)),
                baseline=False) for key in (False, True)]


@pytest.mark.parametrize("tp,micro_batch", [(8, 1), (2, 8)])
def test_the_sync_never_shortens_the_step_and_the_gpu_waits_after_each_one(tmp_path, tp, micro_batch):
    without, synced = _steps(tmp_path, "gpt2-350m", tp, micro_batch)
    assert synced.step_time_s > without.step_time_s
    # After each layer forward's sync the GPU queue is empty until the host has issued the torch.tensor calls
    # and the MLP's first kernel: at least that long idle per layer forward and micro-batch (4 of them).
    idle_s = LAYERS * 4 * (TENSOR_CALLS + FIRST_KERNEL) * DISPATCH_S_PER_OP
    assert synced.breakdown.host_bound >= idle_s * (1 - 1e-6)
    assert synced.step_time_s >= synced.breakdown.compute + idle_s * (1 - 1e-6)


def _tasks(path: Path) -> tuple:
    step = prepare(*load_scenario(path)).step
    builder = StepBuilder(step.model, step.gpu, step.topology, step.plan, symmetric=not step.every_rank,
                          chunks=step.chunks, memo=step.memo, orders=tuple(s.order for s in step.stages))
    return RankProgram(builder, builder.simulated[0]).tasks()


def _segments(path: Path) -> list[tuple[float, float]]:
    """(host seconds, compute seconds) of the tasks after each layer sync up to and including the next one."""
    tasks = _tasks(path)
    syncs = [k for k, task in enumerate(tasks) if task.host_sync and task.name.endswith(SYNCED)]
    return [(sum(t.host_s for t in tasks[a + 1:b + 1]),
             sum(t.duration_s for t in tasks[a + 1:b + 1] if isinstance(t, ComputeTask)))
            for a, b in zip(syncs, syncs[1:])]


@pytest.mark.parametrize("tp,micro_batch", [(8, 1), (4, 4), (1, 2)])
def test_between_two_layer_syncs_host_and_gpu_overlap_at_best(tmp_path, tp, micro_batch):
    # From one sync's release to the next the host issues the tasks between them and the GPU runs them
    # after the release, one compute task after another: the step is at least the sum of the larger of the two.
    path = _scenario(tmp_path, "gpt2-350m", tp, micro_batch, layer_forward_host_sync=True)
    segments = _segments(path)
    assert len(segments) == LAYERS * 4 - 1
    synced = run(*load_scenario(path), baseline=False)
    assert synced.step_time_s >= sum(max(host_s, gpu_s) for host_s, gpu_s in segments)


def test_big_gemms_hide_it(tmp_path):
    without, synced = _steps(tmp_path, "gpt3-13b", 8, 8, seq_len=2048)
    assert synced.step_time_s == pytest.approx(without.step_time_s, rel=0.02)


@pytest.mark.parametrize("tp", [8, 1])
def test_only_megatron_deepspeed_sets_it_and_cuda_graphs_have_no_sync(tmp_path, tp):
    default = run(*load_scenario(_scenario(tmp_path, "gpt2-350m", tp, 1)), baseline=False)
    without, _ = _steps(tmp_path, "gpt2-350m", tp, 1)
    assert default.step_time_s == without.step_time_s
    graphed = _steps(tmp_path, "gpt2-350m", tp, 1, cuda_graphs=True)
    assert graphed[0].step_time_s == graphed[1].step_time_s


@pytest.mark.parametrize("value", ["sometimes", 3, [True]])
def test_a_non_boolean_exits_2_naming_the_file_and_key(tmp_path, value):
    path = _scenario(tmp_path, "gpt2-350m", 8, 1, layer_forward_host_sync=value)
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert "layer_forward_host_sync" in result.output and path.name in result.output
    assert "Traceback" not in result.output



@pytest.mark.parametrize("tp,sequence_parallel", [(1, False), (2, False), (2, True)])
def test_each_sync_adds_the_two_torch_tensor_calls_to_the_host_and_moves_nothing_else(tmp_path, tp, sequence_parallel):
    # issue_early only moves host time between tasks; the key adds the moe_loss and mlp_bias calls once a layer
    # forward, also where a collective follows the sync (sequence parallelism's all-gather before fc1) and at
    # TP 1, where the block is run as its attention and MLP parts so that the sync sits between them
    tasks = []
    for key in (False, True):
        path = _scenario(tmp_path, "gpt2-350m", tp, 1, layer_forward_host_sync=key)
        scenario = yaml.safe_load(path.read_text())
        scenario["parallel"]["sequence_parallel"] = sequence_parallel
        path.write_text(yaml.safe_dump(scenario))
        tasks.append(_tasks(path))
    off, on = tasks
    syncs = sum(task.host_sync and task.name.endswith(SYNCED) for task in on)
    assert syncs == LAYERS * 4
    added = sum(task.host_s for task in on) - sum(task.host_s for task in off)
    assert added == pytest.approx(syncs * TENSOR_CALLS * DISPATCH_S_PER_OP, rel=1e-9)


def test_at_tp_1_each_forward_task_between_syncs_starts_once_its_first_kernel_is_issued(tmp_path):
    # The block's attention part is a compute task: the sync is a zero-length task after it, so the host issues
    # the attention's kernels while the GPU runs them and the sync waits for both (not all the host time first)
    tasks = _tasks(_scenario(tmp_path, "gpt2-350m", 1, 2, layer_forward_host_sync=True))
    syncs = [k for k, task in enumerate(tasks) if task.host_sync and task.name.endswith(SYNCED)]
    first = (TENSOR_CALLS + FIRST_KERNEL) * DISPATCH_S_PER_OP
    within = [tasks[a + 1:b + 1] for a, b in zip(syncs, syncs[1:])
              if not any(task.kind == "backward" for task in tasks[a + 1:b + 1])]    # one micro-batch's forward
    between = [task for segment in within for task in segment
               if isinstance(task, ComputeTask) and task.kind == "forward" and task.duration_s > 0]
    assert len(within) == len(syncs) - 4 and len(between) >= 2 * len(within)    # 4 micro-batches; MLP, attention
    assert all(task.host_s <= first * (1 + 1e-9) for task in between)
