"""AMD Instinct MI455X (CDNA 5, gfx1250) and the Helios rack (node design helios-72).

AMD's published figures are asserted as AMD states them (per GPU, and rack totals over 72 GPUs);
the BF16 peak, which AMD does not publish, is held to what the gfx1250 machine model allows and
to the one measured GEMM. No measurement of a Helios rack exists: nothing here checks a predicted
step time against one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.collectives.library import library_of
from scalesim.hardware import get_gpu, get_link
from scalesim.topology import build_cluster, load_node_design

PF, TB, GIB = 1e15, 1e12, 2 ** 30
RACK = 72


def test_mi455x_is_amds_published_part_and_the_helios_rack_is_72_of_them():
    # AMD (Advancing AI 2025, CES 2026, ROCm blog 04 Aug 2026): 432 GB HBM4, 2.91x MI355X's bandwidth,
    # 20 PF FP8 per GPU and 1.4 EF FP8 per 72-GPU rack; 31 TB HBM4 per rack.
    gpu, mi355x = get_gpu("mi455x"), get_gpu("mi355x")
    assert gpu.memory_bytes == 463_856_467_968 == 432 * GIB          # the bytes the device reports
    assert RACK * 432e9 == pytest.approx(31 * TB, rel=0.01)
    assert gpu.memory_bw_bytes_per_s == pytest.approx(2.91 * mi355x.memory_bw_bytes_per_s, rel=0.01)
    assert gpu.fp8_flop_per_s == pytest.approx(20 * PF)
    assert RACK * gpu.fp8_flop_per_s == pytest.approx(1.4e18, rel=0.03)
    assert gpu.fp8_flop_per_s == pytest.approx(4 * mi355x.fp8_flop_per_s, rel=0.01)   # "up to 4x"
    assert gpu.nvlink_max_gpus == RACK and load_node_design("helios-72").gpus == RACK


def test_the_bf16_peak_is_no_more_than_a_quarter_of_fp8_and_above_the_measured_gemm():
    # gfx1250's machine model: a 16x16x32 BF16 WMMA holds the matrix pipe as long as a 16x16x128 FP8 one,
    # so BF16 is at most a quarter of FP8. The one measured BF16 GEMM (2108 TFLOPS at 8192^3) is a
    # rate the part reached, so the peak is above it and the catalog predicts that rate.
    gpu = get_gpu("mi455x")
    assert 2108e12 < gpu.bf16_flop_per_s <= gpu.fp8_flop_per_s / 4
    assert gpu.bf16_flop_per_s * gpu.gemm_efficiency == pytest.approx(2108e12, rel=0.001)
    # ... and the attention kernels (a fraction of the BF16 peak, CDNA 4's) stay below the GEMM rate,
    # as they do on MI355X.
    from scalesim.costs.flash import FLASH_ATTENTION_EFFICIENCY
    assert FLASH_ATTENTION_EFFICIENCY[gpu.arch] < gpu.gemm_efficiency


def test_helios_scale_up_is_36_tb_per_gpu_bidirectional_260_per_rack_and_scale_out_43():
    port, switch = get_link("ualink-mi455x"), get_link(load_node_design("helios-72").nvlink.switch)
    assert port.kind == "xgmi" and port.bw_bytes_per_s * 2 == pytest.approx(3.6 * TB)
    assert RACK * port.bw_bytes_per_s * 2 == pytest.approx(260 * TB, rel=0.01)
    assert switch.kind == "nvswitch" and switch.bw_bytes_per_s == port.bw_bytes_per_s
    assert not switch.in_network_reduction                            # no NVLS-like reduction published
    nic = get_link(load_node_design("helios-72").nics.link)
    assert nic.bw_bytes_per_s == pytest.approx(300e9)                 # AMD: 300 GB/s scale-out per GPU
    assert RACK * nic.bw_bytes_per_s * 2 == pytest.approx(43 * TB, rel=0.01)
    assert nic.bw_bytes_per_s == 3 * get_link("roce-800g").bw_bytes_per_s    # three 800G Vulcano NICs


def test_the_whole_rack_is_one_rccl_scale_up_domain():
    topo = build_cluster(load_node_design("helios-72"))
    ranks = tuple(range(RACK))
    assert library_of(topo, ranks) == "rccl"
    assert topo.link_class(0, RACK - 1) == "nvlink"                  # GPU 0 to GPU 71 stays on the fabric
    assert len(topo.route(0, RACK - 1)) == len(topo.route(0, 1)) == 2   # single hop: port, switch, port


def _run(tmp_path: Path, scenario: dict) -> dict:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling", "--json"])
    assert result.exit_code in (0, 3), result.output
    return yaml.safe_load(result.output)


def test_a_helios_step_beats_an_mi355x_board_on_the_same_plan(tmp_path):
    scenario = {"name": "8-way TP", "model": "llama3-8b",
                "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
                "parallel": {"tp": 8}}
    steps = {node: _run(tmp_path, {**scenario, "cluster": {"node": node, "gpus": 8}})["step_time_s"]
             for node in ("helios-72", "mi355x-8")}
    assert steps["helios-72"] < steps["mi355x-8"]


def test_432_gib_holds_a_plan_288_gb_does_not(tmp_path):
    # A 70B model split 8 ways by TP, no ZeRO and no recomputation: weights, gradients, AdamW state and
    # three 8k-token micro-batches of activations come to ~1.3x MI355X's 288 GB a GPU, well inside 432 GiB.
    scenario = {"name": "70B TP8", "model": "llama3-70b",
                "training": {"precision": "bf16", "seq_len": 8192, "global_batch": 12, "micro_batch": 3,
                             "activation_checkpointing": "none"},
                "parallel": {"tp": 8}}
    helios = _run(tmp_path, {**scenario, "cluster": {"node": "helios-72", "gpus": 8}})
    mi355x = _run(tmp_path, {**scenario, "cluster": {"node": "mi355x-8", "gpus": 8}})
    assert helios["memory_per_gpu_bytes"] == pytest.approx(mi355x["memory_per_gpu_bytes"], rel=0.05)
    assert helios["fits"] and not mi355x["fits"]
