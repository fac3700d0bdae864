"""HSDP (`parallel.hsdp_shard`, scalesim/parallel/fsdp.py): each unit sharded over one node's data-parallel
ranks and replicated across nodes, each reduced shard all-reduced across its replicas."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design
from scalesim.topology.cluster import Fabric

ROOT = Path(__file__).resolve().parents[2]
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000},
                  seq_len=1024)


def cluster(nics):
    return build_cluster(load_node_design("dgx-a100"), nodes=2, fabric=Fabric("roce-100g", nics, "fat-tree"))


def plan(shard=None):
    return ParallelPlan(Placement(tp=1, cp=1, dp=16, pp=1), 1, 2, "bf16", "adamw", "none", "flash", zero=3,
                        grad_reduce_dtype="bf16", fsdp_version=1, hsdp_shard=shard)


def calls(tasks, name):
    return [t for t in tasks if isinstance(t, CollectiveTask) and t.name == name]


def test_hsdp_gathers_and_scatters_within_the_node_and_all_reduces_each_shard_across_nodes():
    topology = cluster(8)
    tasks = build_program(MODEL, topology.gpu_spec, topology, plan(8)).tasks[0]
    for name in ("zero3 all_gather", "grad reduce_scatter"):
        assert {topology.server_of(r) for t in calls(tasks, name) for r in t.plan.ranks} == {topology.server_of(0)}
    scatters, replicas = calls(tasks, "grad reduce_scatter"), calls(tasks, "grad_replica all_reduce")
    assert len(replicas) == len(scatters) > 0
    assert all(len({topology.server_of(r) for r in t.plan.ranks}) == 2 for t in replicas)
    # each rank all-reduces its 1/8 shard of what the unit's reduce-scatter reduced, on a stream of its own
    assert all(a.plan.size_bytes == pytest.approx(s.plan.size_bytes / 8) for s, a in zip(scatters, replicas))
    assert {t.stream for t in replicas} == {"hsdp_all_reduce"}
    assert not calls(build_program(MODEL, topology.gpu_spec, topology, plan()).tasks[0], "grad_replica all_reduce")


def test_replica_all_reduces_share_the_nics_their_node_has():
    # 8 replica groups per node run at once: on 4 NICs two share each NIC, so each call takes longer than on 8
    def replica_s(nics):
        topology = cluster(nics)
        timeline = simulate(build_program(MODEL, topology.gpu_spec, topology, plan(8)))
        return max(iv.end_s - iv.start_s for iv in timeline.intervals if iv.name == "grad_replica all_reduce")
    assert replica_s(4) > 1.5 * replica_s(8)


def test_replica_groups_copies_are_the_other_ranks_of_each_node():
    pl = Placement(tp=1, cp=1, dp=16, pp=1)
    copies = pl.symmetric_copies((pl.rank(tp=0, cp=0, dp=0, pp=0), pl.rank(tp=0, cp=0, dp=8, pp=0)), ("replica",))
    assert sorted(copies) == [(pl.rank(tp=0, cp=0, dp=k, pp=0), pl.rank(tp=0, cp=0, dp=8 + k, pp=0)) for k in range(1, 8)]


def test_hsdp_holds_the_optimizer_state_of_its_shard_group():
    def state(extra):
        data = yaml.safe_load((ROOT / "validation" / "scenarios" / "fms-fsdp-h100-96gpu-llama2-7b-hsdp-eager.yaml")
                              .read_text())
        data["parallel"].update(extra)
        from scalesim.app.run import run
        from scalesim.scenario import Scenario
        return run(Scenario.model_validate(data), None, baseline=False).to_json()["memory_breakdown_bytes"]["optimizer"]
    assert state({"hsdp_shard": 8}) == pytest.approx(96 / 8 * state({"hsdp_shard": None}))   # over 8 GPUs, not 96


@pytest.mark.parametrize("parallel", [{"hsdp_shard": 3}, {"zero": 2, "hsdp_shard": 4}])
def test_hsdp_that_does_not_divide_dp_or_without_full_sharding_is_refused_naming_the_key(tmp_path, parallel):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data.setdefault("parallel", {}).update({"zero": 3, "fsdp_version": 1, **parallel})
    if parallel.get("zero") == 2:
        data["parallel"].pop("fsdp_version")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output and "hsdp_shard" in result.output


def test_hsdp_shard_that_does_not_divide_dp_is_refused_listing_the_divisors(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data.setdefault("parallel", {}).update({"zero": 3, "fsdp_version": 1, "hsdp_shard": 3})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    dp = 8                                                   # the scenario's 8 GPUs, all data-parallel
    listed = " ".join(result.output.split()).split("allowed here:")[1]
    assert result.exit_code == 2 and all(f"{d}," in listed or f"{d} " in listed for d in (1, 2, 4, dp))
    assert "3," not in listed and "6," not in listed
