"""A run on part of a node is charged its GPUs' share of the node's server, network and host power
(cost_basis: per_gpu_share), not the whole node; a run that fills whole nodes is charged whole nodes."""

import json

from rich.console import Console

from scalesim.app.procurement import nodes_charged
from scalesim.app.run import run
from scalesim.report.tables import result_table
from scalesim.scenario import Scenario

SECONDS_PER_HOUR = 3600.0


def scenario(gpus: int) -> Scenario:
    return Scenario.model_validate({
        "name": "share", "cluster": {"node": "dgx-h100", "gpus": gpus}, "model": "gpt2-350m",
        "training": {"global_batch": 8, "micro_batch": 8 // gpus, "seq_len": 128, "precision": "bf16",
                     "tokens": 1e8}})


def test_one_gpu_of_an_eight_gpu_node_pays_an_eighth_of_its_server_and_host_power():
    r = run(scenario(1), baseline=False)
    econ = json.loads(json.dumps(r.to_json()))["economics"]
    assert econ["cost_basis"] == "per_gpu_share" and econ["nodes_charged"] == 1 / 8
    inputs = {a["input"]: a["value"] for a in r.assumptions}
    server = inputs["server without GPUs (USD/node)"]
    assert econ["on_prem"]["capex_usd"]["servers"] == server / 8
    assert econ["on_prem"]["capex_usd"]["gpus"] == inputs["GPU purchase (USD)"]     # GPUs: one by one, as before
    host_kwh = inputs["host draw (W/node)"] / 8 * r.time_to_train_s / SECONDS_PER_HOUR / 1000
    assert abs(econ["energy_kwh"]["host"] - host_kwh) < 1e-9 * host_kwh
    console = Console(record=True, width=400)
    console.print(result_table(r))
    assert "per_gpu_share" in console.export_text()


def test_whole_nodes_are_charged_whole():
    assert nodes_charged(scenario(8), 8) == (1, "whole_nodes")
    assert nodes_charged(scenario(8), 16) == (2, "whole_nodes")
    assert nodes_charged(scenario(4), 4) == (0.5, "per_gpu_share")
