"""AMD Instinct MI455X (CDNA 5, gfx1250) and the Helios rack (node design helios-72).

AMD's published figures are asserted as AMD states them (per GPU, and rack totals over 72 GPUs);
the BF16 peak, which AMD does not publish, is held to what the gfx1250 machine model allows and
to the one measured GEMM. No measurement of a Helios rack exists: nothing here checks a predicted
step time against one.
"""

from __future__ import annotations

import pytest

from scalesim.collectives.library import library_of
from scalesim.hardware import get_gpu, get_link
from scalesim.topology import build_cluster, load_node_design

PF, TB, GIB = 1e15, 1e12, 2 ** 30
RACK = 72


def test_mi455x_is_amds_published_part_and_the_helios_rack_is_72_of_them():
    # AMD (MI455X product page, Jul 2026; ROCm blog 04 Aug 2026): 256 work group processors at 2.4 GHz,
    # 432 GB HBM4 at 23.3 TB/s (2.91x MI355X), 5.0 PF dense BF16, 20.1 PF FP8; Helios: 72 GPUs, 31 TB HBM4,
    # 1.4 EF FP8.
    gpu, mi355x = get_gpu("mi455x"), get_gpu("mi355x")
    assert gpu.sms == 256 and gpu.sm_clock_hz == pytest.approx(2.4e9)
    assert gpu.memory_bytes == 463_856_467_968 == 432 * GIB          # the bytes the device reports
    assert RACK * (gpu.memory_bytes / GIB) * 1e9 == pytest.approx(31 * TB, rel=0.01)   # AMD's 432 GB x 72
    assert gpu.memory_bw_bytes_per_s == pytest.approx(2.91 * mi355x.memory_bw_bytes_per_s, rel=0.01)
    assert gpu.bf16_flop_per_s == pytest.approx(5.0 * PF, rel=0.01)
    assert gpu.fp8_flop_per_s == pytest.approx(20.1 * PF, rel=0.002)
    assert RACK * gpu.fp8_flop_per_s == pytest.approx(1.4e18, rel=0.04)
    assert gpu.fp8_flop_per_s == pytest.approx(4 * mi355x.fp8_flop_per_s, rel=0.001)   # "up to 4x"
    assert gpu.nvlink_max_gpus == RACK and load_node_design("helios-72").gpus == RACK


def test_bf16_is_a_quarter_of_fp8_at_the_units_and_clock_amd_gives():
    # gfx1250's machine model: a 16x16x32 BF16 WMMA holds the matrix pipe as long as a 16x16x128 FP8 one.
    # Per unit and clock: 8192 BF16 FLOP, as a CDNA 4 CU does FP8 (MI355X: 2516.6 TFLOPS BF16 from 4096).
    gpu, mi355x = get_gpu("mi455x"), get_gpu("mi355x")
    assert gpu.fp8_flop_per_s == pytest.approx(4 * gpu.bf16_flop_per_s, rel=1e-4)
    per_unit_clock = gpu.bf16_flop_per_s / (gpu.sms * gpu.sm_clock_hz)
    assert per_unit_clock == pytest.approx(2 * mi355x.bf16_flop_per_s / (mi355x.sms * mi355x.sm_clock_hz), rel=1e-4)


def test_predicted_gemms_sit_above_the_bring_up_reading_and_above_attention():
    # The one gfx1250 GEMM reading (2108 TFLOPS BF16 at 8192^3, pre-release hipBLASLt) is a floor; the
    # attention kernels (a fraction of the BF16 peak, CDNA 4's) stay below the GEMM rate, as on MI355X.
    from scalesim.costs.flash import FLASH_ATTENTION_EFFICIENCY
    gpu = get_gpu("mi455x")
    assert gpu.bf16_flop_per_s * gpu.gemm_efficiency > 2108e12
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



def test_a_helios_step_beats_an_mi355x_board_on_the_same_plan(run_json):
    scenario = {"name": "8-way TP", "model": "llama3-8b",
                "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
                "parallel": {"tp": 8}}
    steps = {node: run_json({**scenario, "cluster": {"node": node, "gpus": 8}})["step_time_s"]
             for node in ("helios-72", "mi355x-8")}
    assert steps["helios-72"] < steps["mi355x-8"]


def test_432_gib_holds_a_plan_288_gib_does_not(run_json):
    # A 70B model split 8 ways by TP, no ZeRO and no recomputation: weights, gradients, AdamW state and
    # three 8k-token micro-batches of activations come to ~1.2x MI355X's 288 GiB a GPU, well inside 432 GiB.
    scenario = {"name": "70B TP8", "model": "llama3-70b",
                "training": {"precision": "bf16", "seq_len": 8192, "global_batch": 12, "micro_batch": 3,
                             "activation_checkpointing": "none"},
                "parallel": {"tp": 8}}
    helios = run_json({**scenario, "cluster": {"node": "helios-72", "gpus": 8}})
    mi355x = run_json({**scenario, "cluster": {"node": "mi355x-8", "gpus": 8}})
    assert helios["memory_per_gpu_bytes"] == pytest.approx(mi355x["memory_per_gpu_bytes"], rel=0.05)
    assert helios["fits"] and not mi355x["fits"]


def test_two_helios_racks_move_amds_300_gb_a_gpu_not_its_pcie_slots_rate():
    # AMD: 300 GB/s of scale-out a GPU; the GPU's host slot (PCIe 6.0, 121 GB/s) must not carry it
    from scalesim.collectives import plan_collective, plan_time_s
    from scalesim.collectives.busbw import busbw_bytes_per_s
    from scalesim.topology import Fabric
    topo = build_cluster(load_node_design("helios-72"), nodes=2, fabric=Fabric("roce-2400g", RACK))
    nic, slot = get_link("roce-2400g"), get_link(load_node_design("helios-72").pcie.link)
    plan = plan_collective("all_gather", topo, (0, RACK), 4 * GIB, "ring")
    busbw = busbw_bytes_per_s("all_gather", 2, 4 * GIB, plan_time_s(plan, topo.capacity_bytes_per_s))
    assert busbw > slot.bw_bytes_per_s
    assert busbw == pytest.approx(nic.bw_bytes_per_s * nic.efficiency, rel=0.03)
