"""Partial recompute (`training.recompute_num_layers`, Megatron-LM's `--recompute-method block`):
full checkpointing of only the first N transformer blocks of each pipeline chunk."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = 24                                   # gpt2-350m


@pytest.fixture(scope="module")
def base():
    return load_scenario(ROOT / "scenarios" / "8xa100-ddp.yaml")


def _with(base, checkpointing, layers=None):
    scenario, file = base
    return run(scenario.with_changes(training={"activation_checkpointing": checkpointing,
                                               "recompute_num_layers": layers}), file)


@pytest.fixture(scope="module")
def runs(base):
    out = {"none": _with(base, "none"), "full": _with(base, "full")}
    out.update({n: _with(base, "full", n) for n in (0, 6, 12, BLOCKS)})
    return out


def test_recomputing_more_blocks_costs_time_and_saves_memory_step_by_step(runs):
    steps = [runs[n].step_time_s for n in (0, 6, 12, BLOCKS)]
    acts = [runs[n].memory_breakdown["activations"] for n in (0, 6, 12, BLOCKS)]
    assert steps == sorted(steps) and len(set(steps)) == 4
    assert acts == sorted(acts, reverse=True) and len(set(acts)) == 4


def test_no_block_recomputed_is_no_checkpointing_and_every_block_is_full_checkpointing(runs):
    assert runs[0].step_time_s == pytest.approx(runs["none"].step_time_s, rel=1e-12)
    assert runs[0].memory_per_gpu_bytes == pytest.approx(runs["none"].memory_per_gpu_bytes, rel=1e-12)
    assert runs[BLOCKS].memory_breakdown["activations"] == pytest.approx(runs["full"].memory_breakdown["activations"])
    # Megatron never recomputes the output layer; scalesim's plain full checkpointing does
    assert runs[BLOCKS].step_time_s <= runs["full"].step_time_s


def test_recomputed_blocks_add_time_but_no_model_flops(runs):
    work = {n: runs[n].tflops_per_gpu * runs[n].step_time_s for n in (0, 12, BLOCKS)}
    assert work[0] == pytest.approx(work[12]) == pytest.approx(work[BLOCKS])
    assert runs[0].mfu > runs[12].mfu > runs[BLOCKS].mfu


def test_each_pipeline_stage_recomputes_its_own_first_blocks(base):
    scenario, file = base
    piped = scenario.with_changes(parallel={"dp": 4, "pp": 2},
                                  training={"activation_checkpointing": "full", "recompute_num_layers": 3})
    setup = prepare(piped, file)
    for stage, tasks in setup.step.program.tasks.items():
        names = {t.name for t in tasks if getattr(t, "kind", None) == "recompute"}
        assert len(names) == 3, (stage, names)      # 3 blocks per stage, whatever the micro-batch
        assert not any("head" in n or "embed" in n for n in names)


def test_partial_recompute_without_full_checkpointing_is_refused_naming_the_key(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data["training"]["recompute_num_layers"] = 4            # activation_checkpointing stays none
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "recompute_num_layers" in result.output and "full" in result.output
