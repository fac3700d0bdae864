"""nanotron's pipeline engine across servers: a time per decoder layer and micro-batch set by the
tensor-parallel size (scalesim/costs/host.py nanotron_pipeline_layer_s), issued as host time."""

import pytest
import yaml

from scalesim.app.setup import prepare
from scalesim.costs.host import nanotron_pipeline_layer_s, with_layer_host_s
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.scenario import load_scenario
from scalesim.topology import build_cluster, load_node_design
from scalesim.topology.cluster import Fabric

LLAMA = {"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 8, "vocab": 8192, "ffn": "swiglu",
         "ffn_hidden": 2816, "tied_embeddings": True}


def test_the_floor_needs_tensor_and_pipeline_parallelism_across_servers_and_grows_with_tp():
    assert nanotron_pipeline_layer_s(8, 4, 1) == 0.0        # one server: the sweep's runs go at their compute
    assert nanotron_pipeline_layer_s(1, 4, 4) == 0.0        # TP 1: no floor in the sweep
    assert nanotron_pipeline_layer_s(8, 1, 4) == 0.0        # no pipeline
    two, four, eight = (nanotron_pipeline_layer_s(tp, 4, 4) for tp in (2, 4, 8))
    assert 0 < two < four < eight
    assert eight - four == pytest.approx(2 * (four - two))  # the same cost per TP rank


def test_the_layer_time_is_shared_by_its_parts_and_weighs_on_the_backward():
    parts = ({"forward": 1.0, "backward": 2.0, "recompute": 0.0},) * 2
    out = with_layer_host_s(parts, 0.6)
    assert sum(p["forward"] + p["backward"] for p in out) == pytest.approx(6.0 + 0.6)
    assert out[0]["backward"] - 2.0 == pytest.approx(2 * (out[0]["forward"] - 1.0))
    assert with_layer_host_s(parts, 0.0) is parts


def _setup(tmp_path, nodes, balance, tp=2):
    scenario = {"name": "nanotron-pp", "model": LLAMA,
                "cluster": {"node": "dgx-h100", "nodes": nodes, "fabric": {"link": "ib-ndr", "nics_per_node": 8,
                                                                            "topology": "fat-tree"}},
                "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8 * nodes // tp,
                             "micro_batch": 1},
                "parallel": {"dp": 4 * nodes // tp, "tp": tp, "pp": 2, "pipeline_balance": balance}}
    path = tmp_path / f"s{nodes}{balance}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    scenario, file = load_scenario(path)
    return prepare(scenario, file)


def test_only_nanotrons_pipeline_over_several_servers_pays_it(tmp_path):
    assert _setup(tmp_path, 2, "nanotron").plan.pipeline_layer_host_s == nanotron_pipeline_layer_s(2, 2, 2)
    assert _setup(tmp_path, 1, "nanotron").plan.pipeline_layer_host_s == 0.0
    assert _setup(tmp_path, 2, "layers").plan.pipeline_layer_host_s == 0.0


def test_the_step_runs_at_the_floor_with_the_gpu_work_under_it():
    dgx2 = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 8))
    model = get_model(LLAMA, seq_len=1024)
    floor_s = 0.05                          # per layer and micro-batch, far above this model's GPU work

    def step(layer_s):
        plan = ParallelPlan(Placement(tp=2, cp=1, dp=4, pp=2), 1, 4, "bf16", "adamw", "none", "flash",
                            host_dispatch_s=13e-6, pipeline_layer_host_s=layer_s)
        return simulate(build_program(model, dgx2.gpu_spec, dgx2, plan)).end_s

    without, floored = step(0.0), step(floor_s)
    fullest = 4                             # 8 blocks on 2 stages (an even split)
    assert floored >= (4 + 2 - 1) * fullest * floor_s
    assert floored < (4 + 2 - 1) * fullest * floor_s + without
