"""Parts a December 2026 buyer prices: Rubin (Vera Rubin NVL72), GB10 (DGX Spark), DGX Station GB300.

Published figures are asserted as NVIDIA states them (rack totals over 72 GPUs, the DGX Spark
datasheet); the rest are invariants. None of these parts has a measurement: nothing here
checks a predicted time against one.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.calibrate import gpu_of_device
from scalesim.cli import main
from scalesim.hardware import get_gpu, get_link
from scalesim.topology import build_cluster, builtin_topology_names, load_node_design

PF = 1e15
TB = 1e12
GIB = 2 ** 30
NEW_GPUS = ("rubin", "gb10", "mi455x")
NEW_LINKS = ("nvlink6", "nvswitch-vr-nvl72", "nvlink-c2c-vera", "nvlink-c2c-gb10", "lpddr5x-vera",
             "lpddr5x-gb10", "lpddr5x-station", "roce-1600g", "ualink-mi455x", "ualoe-helios", "roce-2400g")
NEW_DESIGNS = ("vera-rubin-nvl72", "dgx-spark", "dgx-station-gb300", "helios-72")


def raw(filename: str) -> dict:
    return yaml.safe_load((resources.files("scalesim.hardware") / "data" / filename).read_text(encoding="utf-8"))


def _figures(value) -> set[str]:
    return {m.rstrip("0").rstrip(".") if "." in m else m for m in re.findall(r"\d+(?:\.\d+)?", str(value))}


# ------------------------------------------------------------ every number cited or estimated

@pytest.mark.parametrize("name", NEW_GPUS)
def test_every_new_gpu_number_is_cited_or_marked_estimated(name):
    entry = raw("gpus.yaml")[name]
    cited = " ".join([*entry["source"], *entry["notes"]]).replace(",", "")
    words = set(re.findall(r"\d+(?:\.\d+)?", cited))
    for field in ("sms", "boost_clock_mhz", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "memory", "memory_bw",
                  "tdp", "idle", "list_price_usd", "gemm_efficiency", "memory_bw_efficiency",
                  "fp8_gemm_efficiency", "gemm_k_overhead"):
        if field not in entry or entry[field] is None or field in entry["estimated"]:
            continue
        assert _figures(entry[field]) <= words, (name, field, entry[field])


@pytest.mark.parametrize("name", NEW_GPUS)
def test_every_carried_over_efficiency_is_marked_estimated(name):
    # No Rubin or GB10 matmul, copy-kernel or clock measurement exists at a stated shape.
    entry = raw("gpus.yaml")[name]
    for field in ("gemm_efficiency", "memory_bw_efficiency", "fp8_gemm_efficiency", "gemm_k_overhead"):
        assert field not in entry or field in entry["estimated"], (name, field)


@pytest.mark.parametrize("name", NEW_LINKS)
def test_new_links_mark_their_efficiency_and_latency_estimated(name):
    entry = raw("links.yaml")[name]
    assert {"latency", "efficiency"} <= set(entry["estimated"]) and entry["source"], name


# ------------------------------------------------------------ published figures

def test_rubin_is_nvidias_vera_rubin_nvl72_rack_divided_over_its_72_gpus():
    # NVIDIA: 72 GPUs, NVLink 6 at 3.6 TB/s per GPU (260 TB/s per rack), 19.2 TB/s HBM4 per GPU (the product
    # page; CES said 22), 17.5 PF FP8 per GPU (product page; half the 35 PF NVFP4 training), 1.2 EF FP8 per rack.
    rubin = get_gpu("rubin")
    port = get_link(rubin.nvlink)
    assert port.bw_bytes_per_s * 2 == pytest.approx(3.6 * TB)
    assert port.bw_bytes_per_s * 2 * 72 == pytest.approx(260 * TB, rel=0.01)
    assert rubin.fp8_flop_per_s == pytest.approx(35e15 / 2)
    assert rubin.fp8_flop_per_s * 72 == pytest.approx(1.2e18, rel=0.06)
    assert rubin.memory_bw_bytes_per_s == pytest.approx(19.2 * TB)
    # ...which the HBM4 clock an nvidia-smi capture of a Vera Rubin tray reports bears out: 4752 MHz, double
    # data rate, over 8 stacks of 2048 bits (B200's 3996 MHz over 8192 bits gives its 8 TB/s the same way).
    assert rubin.memory_bw_bytes_per_s == pytest.approx(4752e6 * 2 * 8 * 2048 / 8, rel=0.02)
    assert get_gpu("b200").memory_bw_bytes_per_s == pytest.approx(3996e6 * 2 * 8 * 1024 / 8, rel=0.07)
    # the same capture: 286524 MiB usable of the 288 GB, a 2424 MHz maximum SM clock
    assert rubin.memory_bytes == 286524 * 2 ** 20 and rubin.sm_clock_hz == pytest.approx(2424e6)
    assert rubin.nvlink_max_gpus == 72
    switch = get_link(load_node_design("vera-rubin-nvl72").nvlink.switch)
    assert switch.kind == "nvswitch" and switch.bw_bytes_per_s == port.bw_bytes_per_s


def test_rubin_draws_the_tgp_nvidia_submits_its_nvl72_rack_with():
    # NVIDIA's MLPerf Inference v6.1 system files (VR-NVL72 and VR200-NVL72): '2300W TGP Per GPU', the
    # Max-P end of the 190-230 kW rack; more than GB300's 1400 W TGP in the same round's GB300 NVL72 file.
    assert get_gpu("rubin").tdp_w == 2300
    assert get_gpu("rubin").tdp_w > get_gpu("gb300").tdp_w


def test_rubin_doubles_blackwells_nvlink_and_c2c_and_connectx9_doubles_connectx8():
    assert get_link("nvlink6").bw_bytes_per_s == 2 * get_link("nvlink5").bw_bytes_per_s
    assert get_link("nvlink-c2c-vera").bw_bytes_per_s == 2 * get_link("nvlink-c2c").bw_bytes_per_s
    assert get_link("roce-1600g").bw_bytes_per_s == 2 * get_link("roce-800g").bw_bytes_per_s
    assert get_gpu("rubin").memory_bw_bytes_per_s > 2.3 * get_gpu("gb300").memory_bw_bytes_per_s   # 19.2 vs 8 TB/s


def test_gb10_peaks_follow_nvidias_one_fp4_petaflop_with_sparsity():
    # DGX Spark datasheet: 1 PFLOP FP4 with sparsity; Hot Chips 2025: ~31 TFLOPS FP32.
    # Sparse -> dense halves, FP4 -> FP8 halves, FP16 -> FP32 accumulate halves (sm_12x, as the RTX 5090).
    gb10 = get_gpu("gb10")
    assert gb10.fp8_flop_per_s * 2 * 2 * 2 == pytest.approx(1 * PF)
    assert gb10.fp32_flop_per_s == pytest.approx(31e12)
    assert gb10.bf16_flop_per_s == pytest.approx(2 * gb10.fp32_flop_per_s, rel=0.01)   # the GeForce rule
    assert gb10.sms == 6144 // 128 and gb10.nvlink is None and not gb10.mig


def test_gb10_gpu_memory_is_the_shared_lpddr5x_pool_not_a_memory_of_its_own():
    # One 128 GB pool at 273 GB/s serves the CPU and the GPU: the GPU's bandwidth is the host memory
    # link's, and the GPU's capacity is no more than the pool (the OS keeps part of it).
    gb10, design = get_gpu("gb10"), load_node_design("dgx-spark")
    assert gb10.memory_bw_bytes_per_s == get_link(design.host.memory).bw_bytes_per_s == pytest.approx(273e9)
    assert gb10.memory_bytes < 128 * GIB
    assert design.host.memory_gb == 128        # the same pool, counted again (a documented limit)


def test_dgx_station_keeps_hbm_and_lpddr5x_apart():
    design = load_node_design("dgx-station-gb300")
    assert design.gpu == "gb300" and design.gpus == 1
    assert design.host.memory_gb == 496 and get_link(design.host.memory).bw_bytes_per_s == pytest.approx(396e9)
    assert get_gpu("gb300").memory_bw_bytes_per_s == pytest.approx(8 * TB)


# ------------------------------------------------------------ the designs run


def _small(node: str, gpus: int) -> dict:
    return {"name": f"small on {node}", "cluster": {"node": node, "gpus": gpus}, "model": "llama3.2-1b",
            "training": {"precision": "bf16", "seq_len": 2048, "global_batch": 4 * gpus, "micro_batch": 2},
            "parallel": {"dp": gpus}}


@pytest.mark.parametrize("node, gpus", [("vera-rubin-nvl72", 8), ("dgx-spark", 1), ("dgx-station-gb300", 1),
                                        ("helios-72", 8)])
def test_a_training_scenario_runs_on_each_new_design(run_json, node, gpus):
    assert node in builtin_topology_names()
    build_cluster(load_node_design(node))
    out = run_json(_small(node, gpus))
    assert out["fits"] and out["step_time_s"] > 0 and out["gpu"] == load_node_design(node).gpu


def test_a_rubin_step_is_not_slower_than_a_b200_or_gb300_one_for_the_same_plan(run_json):
    scenario = {"name": "8-way TP", "model": "llama3-8b",
                "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
                "parallel": {"tp": 8}}
    steps = {node: run_json({**scenario, "cluster": {"node": node, "gpus": 8}})["step_time_s"]
             for node in ("vera-rubin-nvl72", "gb300-nvl72", "hgx-b200")}
    assert steps["vera-rubin-nvl72"] <= steps["gb300-nvl72"] <= steps["hgx-b200"]


def _qlora_70b(node: dict | str, finetune: str = "qlora") -> dict:
    return {"name": "70B adapter fine-tune", "cluster": {"node": node}, "model": "llama3-70b",
            "training": {"precision": "bf16", "seq_len": 2048, "global_batch": 1, "micro_batch": 1,
                         "activation_checkpointing": "full", "finetune": finetune,
                         "lora": {"rank": 16, "targets": ["q", "k", "v", "o"]}}}


def test_the_gb10s_memory_capacity_is_what_lets_a_70b_qlora_fit_on_one_chip(run_json):
    # A 4-bit 70B base (~35 GB) fits in the DGX Spark's pool; the same plan does not fit in a 32 GB
    # RTX 5090, nor does a 16-bit base (~140 GB) fit on the Spark.
    assert run_json(_qlora_70b("dgx-spark"))["fits"]
    rtx5090 = {"name": "one-5090", "gpu": "rtx5090", "gpus": 1, "pcie": {"link": "pcie-gen5"}}
    assert not run_json(_qlora_70b(rtx5090))["fits"]
    assert not run_json(_qlora_70b("dgx-spark", finetune="lora"))["fits"]


def test_a_dgx_spark_log_names_the_gb10():
    # nvidia-smi on a DGX Spark prints 'NVIDIA GB10' (public captures); GB200 and GB300 keep their parts.
    assert gpu_of_device("NVIDIA GB10", "log") == "gb10"
    assert gpu_of_device("NVIDIA GB200", "log") == "gb200" and gpu_of_device("NVIDIA GB300", "log") == "gb300"


# A capability (ECC, MIG, NVLink SHARP) is as much a catalog claim as a number: the new parts' entries
# either name it in their sources and notes or mark it `estimated` (an assumption carried over).
CAPABILITY_WORDS = {"ecc": ("ecc",), "mig": ("mig",), "pcie_p2p": ("p2p", "peer"),
                    "in_network_reduction": ("sharp", "nvls", "in-network")}


@pytest.mark.parametrize("filename,name", [*(("gpus.yaml", g) for g in NEW_GPUS),
                                           *(("links.yaml", link) for link in NEW_LINKS)])
def test_every_new_capability_flag_is_cited_or_marked_estimated(filename, name):
    entry = raw(filename)[name]
    cited = " ".join([*entry.get("source", []), *entry.get("notes", [])]).lower()
    for field, words in CAPABILITY_WORDS.items():
        if entry.get(field) is None or entry[field] is False and field != "mig" or field in entry["estimated"]:
            continue
        assert any(w in cited for w in words), (name, field, entry[field])


def test_the_shipped_dgx_spark_scenario_buys_one_machine_not_a_server_around_it():
    # gb10's list price is the whole DGX Spark (catalog notes): the purchase is that price, and the
    # host's draw fits inside the machine's 240 W supply beside the 140 W GB10 SoC.
    path = Path(__file__).resolve().parents[2] / "scenarios" / "1xdgx-spark-llama3-70b-qlora.yaml"
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling", "--json"])
    own = yaml.safe_load(result.output)["economics"]["on_prem"]
    assert own["capex_total_usd"] == get_gpu("gb10").list_price_usd
    assert own["host_power_w_per_node"] + get_gpu("gb10").tdp_w <= 240
