"""CUDA graphs only where the plan can run them (scenario/graphs.py): PyTorch FSDP1 and DeepSpeed ZeRO-3 gather
and free each layer's parameters from hooks around it, which graph capture cannot take (pytorch/pytorch#127225,
deepspeedai/DeepSpeed#6552); FSDP2 runs them as torch.compile's per-block graphs. A scenario asking for them
with FSDP1 or DeepSpeed ZeRO-3 is refused; searches and what-ifs that move a graphed plan to those ZeRO-3s
drop the graphs; the host-bound hint names graphs only where the plan could use them."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.fitting import _keys_that_go_with
from scalesim.app.plans import PlanPoint, scenario_for
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.report.host_note import host_bound_note
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())


def scenario_file(tmp_path, **parallel):
    data = {**BASE, "training": {**BASE["training"], "cuda_graphs": True},
            "parallel": {**BASE["parallel"], **parallel}}
    path = tmp_path / "graphs.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("parallel, why", [({"zero": 3, "fsdp_version": 1}, "pytorch/pytorch#127225"),
                                           ({"zero": 3}, "deepspeedai/DeepSpeed#6552")])
def test_graphs_with_fsdp1_or_deepspeed_zero3_are_refused_naming_the_file_key_and_what_is_allowed(tmp_path, parallel,
                                                                                                   why):
    file = scenario_file(tmp_path, **parallel)
    result = CliRunner().invoke(main, ["run", file])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    out = " ".join(result.output.split())
    assert file in out and "key 'training.cuda_graphs'" in out and why in out
    assert "false" in out and "fsdp_version: 2" in out             # what is allowed instead


def test_graphs_with_fsdp2_and_without_zero3_are_accepted(tmp_path):
    for parallel in ({"zero": 3, "fsdp_version": 2}, {"zero": 1}, {}):
        scenario, _ = load_scenario(scenario_file(tmp_path, **parallel))
        assert scenario.training.cuda_graphs


def test_a_search_point_at_deepspeed_zero3_drops_the_graphs_and_others_keep_them(tmp_path):
    base, file = load_scenario(scenario_file(tmp_path, zero=1))
    assert not scenario_for(base, PlanPoint(8, 8, zero=3, micro_batch=8), file).training.cuda_graphs
    assert scenario_for(base, PlanPoint(8, 8, zero=2, micro_batch=8), file).training.cuda_graphs
    fsdp2, file2 = load_scenario(scenario_file(tmp_path, zero=3, fsdp_version=2))
    assert scenario_for(fsdp2, PlanPoint(8, 8, zero=3, micro_batch=8), file2).training.cuda_graphs


def test_a_what_if_to_zero3_drops_the_graphs_so_it_can_be_formed(tmp_path):
    base, file = load_scenario(scenario_file(tmp_path, zero=1))
    setup = prepare(base, file)
    changed = _keys_that_go_with(setup, {"parallel": {"zero": 3}})
    assert changed["training"]["cuda_graphs"] is False
    base.with_changes(**changed)                                   # not refused
    assert "cuda_graphs" not in _keys_that_go_with(setup, {"parallel": {"zero": 2}})["training"]


LAYER_BOUND = {"cpu_s": {"layer_kernels": 0.8, "fsdp": 0.1, "other": 0.1},
               "blocking_syncs": {"fsdp_rate_limiter": 0, "other": 0}, "cuda_graphs": False}


def note(micro_batches=4, **host):
    return host_bound_note(SimpleNamespace(breakdown=SimpleNamespace(host_bound=0.3), step_time_s=1.0,
                                           host={**LAYER_BOUND, **host}, plan={"micro_batches": micro_batches}))


def test_the_hint_does_not_offer_graphs_a_zero3_plan_cannot_run_but_what_it_could_use():
    for blocker, version in (("PyTorch FSDP1", 1), ("DeepSpeed ZeRO-3", None)):
        text = note(fsdp_version=version, cuda_graphs_blocked_by=blocker)
        assert "removes most of it" not in text and f"cannot capture {blocker}" in text
        assert "training.micro_batch" in text and "parallel.fsdp_version: 2" in text
        assert "training.micro_batch" not in note(1, fsdp_version=version, cuda_graphs_blocked_by=blocker)
    fsdp2 = note(fsdp_version=2, cuda_graphs_blocked_by=None)
    assert "training.cuda_graphs" in fsdp2 and "torch.compile" in fsdp2 and "cannot" not in fsdp2
