"""The GB300 (Blackwell Ultra, NVL72) part: NVIDIA's rack figures per GPU, and every number cited or estimated."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml

from scalesim.app.calibrate import gpu_of_device
from scalesim.hardware import get_gpu

PF = 1e15
MIB = 2 ** 20


def raw_gb300() -> dict:
    text = (resources.files("scalesim.hardware") / "data" / "gpus.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["gb300"]


def test_gb300_is_nvidias_nvl72_rack_divided_over_its_72_gpus():
    # NVIDIA GB300 NVL72 page: FP16/BF16 360 PF and FP8 720 PF with sparsity (twice dense), 576 TB/s of HBM3e,
    # 72 GPUs in one NVLink domain; 1.4 kW per GPU; 152 SMs enabled, as GB200 (triton #2768), of the die's 160.
    gpu = get_gpu("gb300")
    assert gpu.bf16_flop_per_s * 2 * 72 == pytest.approx(360 * PF)
    assert gpu.fp8_flop_per_s * 2 * 72 == pytest.approx(720 * PF)
    assert gpu.memory_bw_bytes_per_s * 72 == pytest.approx(576e12)
    assert gpu.tdp_w == 1400 and gpu.nvlink_max_gpus == 72 and gpu.sms == 152 == get_gpu("gb200").sms
    # MLPerf Training v5.1's Theia system files: 'accelerator_memory_capacity': '284208 MiB'.
    assert gpu.memory_bytes == 284208 * MIB


def test_gb300_keeps_gb200s_rated_tensor_peaks_with_half_as_much_memory_again():
    gb300, gb200 = get_gpu("gb300"), get_gpu("gb200")
    assert gb300.bf16_flop_per_s == gb200.bf16_flop_per_s and gb300.fp8_flop_per_s == gb200.fp8_flop_per_s
    assert 1.45 < gb300.memory_bytes / gb200.memory_bytes < 1.55      # 288 GB against 186 GB marketed
    assert gb300.int8_op_per_s < gb200.int8_op_per_s / 10             # Blackwell Ultra cuts INT8 tensor work


def _figures(value) -> set[str]:
    return {m.rstrip("0").rstrip(".") if "." in m else m for m in re.findall(r"\d+(?:\.\d+)?", str(value))}


@pytest.mark.parametrize("field", ["sms", "boost_clock_mhz", "fp8_gemm_efficiency", "fp32", "tf32", "fp16", "bf16",
                                   "fp8", "int8", "memory", "memory_bw", "tdp", "idle", "cloud_usd_per_gpu_hour",
                                   "gemm_efficiency", "memory_bw_efficiency", "gemm_k_overhead"])
def test_every_gb300_number_is_cited_or_marked_estimated(field):
    entry = raw_gb300()
    if field in entry["estimated"]:
        return
    cited = " ".join([*entry["source"], *entry["notes"]]).replace(",", "")
    words = set(re.findall(r"\d+(?:\.\d+)?", cited))
    assert _figures(entry[field]) <= words, (field, entry[field])


def test_a_gb300_device_name_is_not_read_as_the_hgx_b300():
    assert gpu_of_device("NVIDIA GB300", "log") == "gb300"
    assert gpu_of_device("NVIDIA B300 SXM6 AC", "log") == "b300"


def test_the_gemm_efficiency_notes_say_which_figure_is_measured_and_which_is_anchored():
    # aiconf15: bf16 is GB300's own best large GEMM in NVIDIA's aiconfigurator table; fp8 is GB200's measured
    # fraction carried at the tables' GB300/GB200 ratio, and stays marked estimated.
    entry = raw_gb300()
    assert "gemm_efficiency" not in entry["estimated"] and "fp8_gemm_efficiency" in entry["estimated"]
    note = next(n for n in entry["notes"] if n.startswith("gemm_efficiency, fp8_gemm_efficiency (aiconf15"))
    assert "2083.6" in note and "0.723 x 1.083" in note


def test_b300_is_the_blackwell_ultra_datasheets_hgx_part():
    # NVIDIA Blackwell Ultra datasheet, as NVIDIA's aiconfigurator b300_sxm.yaml reads it: 62 TB/s of HBM3e
    # over the 8 GPUs of an HGX/DGX B300, 275040 MiB as nvidia-smi reports it, BF16 2.25 / FP8 4.5 PF dense,
    # INT8 307 TOPS with sparsity (Blackwell Ultra cuts INT8 tensor work: below BF16, as on GB300), 1100 W.
    b300, gb300 = get_gpu("b300"), get_gpu("gb300")
    assert b300.memory_bw_bytes_per_s * 8 == pytest.approx(62e12)
    assert b300.memory_bytes == 275040 * MIB
    assert b300.fp8_flop_per_s == 2 * b300.bf16_flop_per_s == pytest.approx(4.5 * PF)
    assert b300.int8_op_per_s * 2 == pytest.approx(307e12)
    assert b300.int8_op_per_s < b300.bf16_flop_per_s and gb300.int8_op_per_s < gb300.bf16_flop_per_s
    assert b300.tdp_w == 1100 < gb300.tdp_w
    # the same die at a lower power limit: the HGX part is rated no faster than the NVL72 one
    assert b300.memory_bw_bytes_per_s < gb300.memory_bw_bytes_per_s and b300.bf16_flop_per_s < gb300.bf16_flop_per_s
