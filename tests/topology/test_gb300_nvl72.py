"""The GB300 NVL72 rack design: one NVLink domain of 72 Blackwell Ultra GPUs, an 800 Gb/s NIC per GPU."""

from pathlib import Path

import yaml
from click.testing import CliRunner

from scalesim.app.collective_bench import time_collective
from scalesim.cli import main
from scalesim.hardware import get_link
from scalesim.topology import Fabric, build_cluster, builtin_topology_names, load_node_design

GB = 2**30


def test_gb300_nvl72_ships_as_one_nvlink_domain_of_72_gb300():
    assert "gb300-nvl72" in builtin_topology_names()
    design = load_node_design("gb300-nvl72")
    assert design.gpu == "gb300" and design.gpus == 72
    t = build_cluster(design)
    assert [t.graph.nodes[n]["kind"] for n in t.path(0, 71)] == ["gpu", "nvswitch", "gpu"]


def test_its_connectx8_nics_carry_twice_the_gb200_racks_connectx7():
    gb300, gb200 = load_node_design("gb300-nvl72"), load_node_design("gb200-nvl72")
    assert gb300.nics.count == gb200.nics.count == 72
    assert get_link(gb300.nics.link).bw_bytes_per_s == 2 * get_link(gb200.nics.link).bw_bytes_per_s


def test_two_gb300_racks_all_reduce_faster_than_two_gb200_racks():
    # Same NVLink domain inside a rack; across racks 800 Gb/s XDR against 400 Gb/s NDR per GPU.
    size = 4 * GB
    gb300 = build_cluster(load_node_design("gb300-nvl72"), nodes=2, fabric=Fabric("ib-xdr"))
    gb200 = build_cluster(load_node_design("gb200-nvl72"), nodes=2, fabric=Fabric("ib-ndr"))
    assert time_collective(gb300, "all_reduce", 144, size).time_s < time_collective(gb200, "all_reduce", 144, size).time_s


def test_a_training_scenario_runs_on_gb300_nvl72(tmp_path: Path):
    scenario = {"name": "gb300-small", "cluster": {"node": "gb300-nvl72", "gpus": 8}, "model": "llama3.2-1b",
                "training": {"precision": "bf16", "seq_len": 2048, "global_batch": 16, "micro_batch": 2},
                "parallel": {"dp": 8}}
    path = tmp_path / "gb300.yaml"
    path.write_text(yaml.safe_dump(scenario))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling", "--json"])
    assert result.exit_code == 0, result.output
    out = yaml.safe_load(result.output)
    assert out["gpu"] == "gb300" and out["fits"] and out["step_time_s"] > 0
