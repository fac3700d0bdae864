"""The hardware catalog: datasheet facts, invariants, and the errors users see.

Numbers asserted here come from datasheets and whitepapers (cited inline), not
from the catalog itself; the rest are invariants every entry must satisfy.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from scalesim.errors import InputError
from scalesim.hardware import GpuSpec, LinkSpec, get_gpu, get_link, gpus, links
from scalesim.hardware.catalog import load_gpu_mapping, load_link_mapping

# shared/DESIGN.md, "Names that scenarios use".
DESIGN_GPUS = ["rtx3090", "rtx4090", "rtx5090", "l40s", "a100-40gb-pcie", "a100-80gb-sxm",
               "h100-pcie", "h100-sxm", "h200-sxm", "b200"]
DESIGN_LINKS = ["pcie-gen3", "pcie-gen4", "pcie-gen5", "nvlink3", "nvlink4", "nvlink5", "ib-hdr",
                "ib-ndr", "ib-xdr", "roce-100g", "roce-200g", "roce-400g", "eth-100g", "eth-200g",
                "eth-400g"]
GEFORCE = ["rtx3090", "rtx4090", "rtx5090"]
TB = 1e12  # FLOP/s per TFLOPS
GB = 1e9   # bytes/s per GB/s


def raw_entries(filename: str) -> dict:
    text = (resources.files("scalesim.hardware") / "data" / filename).read_text(encoding="utf-8")
    return yaml.safe_load(text)


# ------------------------------------------------------------ names and sources

@pytest.mark.parametrize("name", DESIGN_GPUS)
def test_design_gpu_names_exist(name):
    assert isinstance(get_gpu(name), GpuSpec)


@pytest.mark.parametrize("name", DESIGN_LINKS)
def test_design_link_names_exist(name):
    assert isinstance(get_link(name), LinkSpec)


def test_every_entry_cites_a_source():
    for spec in [*gpus().values(), *links().values()]:
        assert spec.source, spec.name
        assert all(isinstance(s, str) and s.strip() for s in spec.source), spec.name


def test_tables_keep_file_order_and_are_copies():
    assert list(gpus()) == list(raw_entries("gpus.yaml"))
    assert list(links()) == list(raw_entries("links.yaml"))
    table = gpus()
    table.clear()
    assert gpus(), "callers must not be able to empty the cached catalog"


def test_estimated_lists_name_real_fields():
    assert "idle" in raw_entries("gpus.yaml")["rtx4090"]["estimated"]
    entry = dict(raw_entries("gpus.yaml")["rtx4090"], estimated=["idel"])
    with pytest.raises(InputError) as err:
        load_gpu_mapping(entry, name="x", key="gpu")
    assert err.value.key == "gpu.estimated"


# ------------------------------------------------------------ datasheet facts

def test_h100_sxm_is_dense_not_sparse():
    # H100 datasheet: BF16 1,979 TFLOPS "with sparsity"; dense is half.
    h100 = get_gpu("h100-sxm")
    assert h100.bf16_flop_per_s == pytest.approx(989.4 * TB)
    assert h100.bf16_flop_per_s != pytest.approx(1978.9 * TB)
    assert h100.tf32_flop_per_s == pytest.approx(494.7 * TB)
    assert h100.fp32_flop_per_s == pytest.approx(66.9 * TB)


def test_rtx4090_uses_fp32_accumulate_rate_and_real_bandwidth():
    # Ada whitepaper v2.1 Appendix A: FP16/BF16 tensor with FP32 accumulate 165.2 dense;
    # memory 1,008 GB/s (384-bit, 21 Gbps), not the 576 GB/s of the marketing article.
    rtx = get_gpu("rtx4090")
    assert rtx.bf16_flop_per_s == pytest.approx(165.2 * TB)
    assert rtx.fp16_flop_per_s == pytest.approx(165.2 * TB)
    assert rtx.fp8_flop_per_s == pytest.approx(330.3 * TB)
    assert rtx.memory_bw_bytes_per_s == pytest.approx(1008 * GB)
    assert rtx.memory_bytes == 24 * 2**30


def test_a100_and_l40s_datasheet_peaks():
    assert get_gpu("a100-80gb-sxm").bf16_flop_per_s == pytest.approx(312 * TB)
    assert get_gpu("a100-80gb-sxm").memory_bw_bytes_per_s == pytest.approx(2039 * GB)
    assert get_gpu("h100-pcie").bf16_flop_per_s == pytest.approx(756 * TB)
    assert get_gpu("l40s").bf16_flop_per_s == pytest.approx(362.05 * TB)


@pytest.mark.parametrize("name", GEFORCE)
def test_geforce_tensor_rate_is_twice_fp32(name):
    # GeForce FP32-accumulate tensor rate = 2x non-tensor FP32 (71/35.6, 165.2/82.6, 209.5/104.8).
    gpu = get_gpu(name)
    assert gpu.bf16_flop_per_s == pytest.approx(2 * gpu.fp32_flop_per_s, rel=0.01)
    assert gpu.tf32_flop_per_s == pytest.approx(gpu.fp32_flop_per_s)


def test_datacenter_bf16_is_twice_tf32():
    # CDNA 4 (MI355X) has no TF32 matrix rate: AMD publishes none, so TF32 runs at the FP32 rate.
    for gpu in gpus().values():
        if gpu.name not in GEFORCE and gpu.arch != "cdna4":
            assert gpu.bf16_flop_per_s == pytest.approx(2 * gpu.tf32_flop_per_s, rel=0.03), gpu.name


# The 2026 parts break the rule: CDNA 5 (MI455X, gfx1250; LLVM's machine model holds the matrix pipe as long
# for a 16x16x32 BF16 WMMA as for a 16x16x128 FP8 one, and AMD publishes 5.0 / 20.1 PF) and Rubin (NVIDIA's
# product page: ~4 PF BF16, 17.5 PF FP8) run FP8 at least four times their BF16 rate (catalog notes).
FP8_AT_LEAST_FOUR_TIMES_BF16 = ("mi455x", "rubin")


def test_fp8_doubles_bf16_where_present():
    for gpu in gpus().values():
        if gpu.fp8_flop_per_s is not None and gpu.name not in FP8_AT_LEAST_FOUR_TIMES_BF16:
            assert gpu.fp8_flop_per_s == pytest.approx(2 * gpu.bf16_flop_per_s, rel=0.02), gpu.name


def test_the_2026_parts_run_fp8_at_least_four_times_their_bf16_rate():
    for name in FP8_AT_LEAST_FOUR_TIMES_BF16:
        gpu = get_gpu(name)
        assert gpu.fp8_flop_per_s >= 4 * gpu.bf16_flop_per_s * (1 - 1e-4), name   # 4 x 5033.2 vs 20132.7


def test_fp8_absent_exactly_on_ampere():
    for gpu in gpus().values():
        assert (gpu.fp8_flop_per_s is None) == (gpu.arch == "ampere"), gpu.name
    with pytest.raises(InputError, match="fp8"):
        get_gpu("a100-80gb-sxm").peak_flop_per_s("fp8")


def test_h200_and_b200_capacities_are_the_reported_mib():
    # MLPerf system JSONs: H200 143771 MiB, B200 183359 MiB.
    assert get_gpu("h200-sxm").memory_bytes == 143771 * 2**20
    assert get_gpu("b200").memory_bytes == 183359 * 2**20
    assert get_gpu("h200-sxm").memory_bytes > get_gpu("h100-sxm").memory_bytes


def test_nvlink_is_per_direction():
    # 900 GB/s (H100) is 18 links x 25 GB/s x 2 directions.
    assert get_link("nvlink3").bw_bytes_per_s == pytest.approx(300 * GB)
    assert get_link("nvlink4").bw_bytes_per_s == pytest.approx(450 * GB)
    assert get_link("nvlink5").bw_bytes_per_s == pytest.approx(900 * GB)
    assert get_link("nvlink3-bridge-ga102").bw_bytes_per_s == pytest.approx(56.25 * GB)


def test_network_rates_convert_bits_to_bytes():
    assert get_link("ib-hdr").bw_bytes_per_s == pytest.approx(25 * GB)
    assert get_link("ib-ndr").bw_bytes_per_s == pytest.approx(50 * GB)
    assert get_link("roce-400g").bw_bytes_per_s == pytest.approx(50 * GB)
    # nccl-tests #119: 24 GB/s peak per 200G NIC.
    assert get_link("ib-hdr").effective_bw_bytes_per_s == pytest.approx(24 * GB)


def test_pcie_generations_double():
    gen3, gen4, gen5 = (get_link(f"pcie-gen{n}").bw_bytes_per_s for n in (3, 4, 5))
    assert gen4 == pytest.approx(2 * gen3)
    assert gen5 == pytest.approx(2 * gen4, rel=0.001)


def test_nvswitch_ports_match_the_nvlink_ports_they_serve():
    for switch, port in (("nvswitch-gen2", "nvlink3"), ("nvswitch-gen3", "nvlink4"),
                         ("nvswitch-gen4", "nvlink5")):
        assert get_link(switch).kind == "nvswitch"
        assert get_link(switch).bw_bytes_per_s == get_link(port).bw_bytes_per_s
    assert not get_link("nvswitch-gen2").in_network_reduction  # NVLS arrived with gen 3
    assert get_link("nvswitch-gen3").in_network_reduction
    assert get_link("nvswitch-gen4").in_network_reduction


def test_blackwell_nvls_reaches_less_of_its_port_than_hopper():
    # NCCL's tuner rates NVLS at 0.74 of the NVLink bandwidth on Blackwell and 0.85 on Hopper
    # (nvlsEfficiency, NVIDIA/nccl v2.28.3-1 src/graph/tuning.cc); the Blackwell switches follow that ratio.
    hopper = get_link("nvswitch-gen3").efficiency
    for switch in ("nvswitch-gen4", "nvswitch-nvl72"):
        assert get_link(switch).efficiency == pytest.approx(hopper * 0.74 / 0.85, abs=0.001)


def test_host_memory_links():
    ddr4 = get_link("ddr4-3200-8ch")
    assert ddr4.kind == "memory"
    assert ddr4.bw_bytes_per_s == pytest.approx(8 * 3200e6 * 8)  # 8 channels x 3200 MT/s x 8 B
    assert get_link("ddr5-4800-12ch").bw_bytes_per_s == pytest.approx(12 * 4800e6 * 8)


# ------------------------------------------------------------ invariants

def test_efficiencies_are_fractions():
    for gpu in gpus().values():
        assert 0 < gpu.gemm_efficiency <= 1, gpu.name
        assert 0 < gpu.memory_bw_efficiency <= 1, gpu.name
    for link in links().values():
        assert 0 < link.efficiency <= 1, link.name


def test_quantities_are_positive_and_sane():
    for gpu in gpus().values():
        assert gpu.memory_bytes > 0 and gpu.memory_bw_bytes_per_s > 0, gpu.name
        assert 0 < gpu.fp32_flop_per_s <= gpu.tf32_flop_per_s <= gpu.bf16_flop_per_s, gpu.name
        assert 0 < gpu.idle_w < gpu.tdp_w, gpu.name
        assert gpu.fp16_flop_per_s == gpu.bf16_flop_per_s, gpu.name
    for link in links().values():
        assert link.bw_bytes_per_s > 0 and link.latency_s >= 0, link.name


def test_gpu_ports_name_catalog_links_of_the_right_kind():
    table = links()
    for gpu in gpus().values():
        assert table[gpu.pcie].kind == "pcie", gpu.name
        if gpu.nvlink is None:
            assert gpu.nvlink_max_gpus == 0, gpu.name
        else:
            assert table[gpu.nvlink].kind in ("nvlink", "xgmi"), gpu.name   # AMD: Infinity Fabric
            assert gpu.nvlink_max_gpus >= 2, gpu.name


def test_p2p_and_mig_follow_the_product_line():
    for gpu in gpus().values():
        assert gpu.pcie_p2p == (gpu.name not in GEFORCE), gpu.name
    assert all(not get_gpu(n).mig for n in GEFORCE)
    assert get_gpu("h100-sxm").mig and get_gpu("a100-40gb-pcie").mig


def test_link_kinds_are_known():
    kinds = {"pcie", "nvlink", "nvswitch", "xgmi", "socket", "infiniband", "roce", "ethernet", "memory"}
    assert {link.kind for link in links().values()} <= kinds
    for link in links().values():
        assert not link.in_network_reduction or link.kind == "nvswitch", link.name


def test_rdma_beats_tcp():
    assert get_link("roce-100g").efficiency > get_link("eth-100g").efficiency


# ------------------------------------------------------------ errors users see

def test_unknown_gpu_suggests_the_closest():
    with pytest.raises(InputError) as err:
        get_gpu("rtx4900", key="cluster.node.gpu")
    assert "rtx4090" in str(err.value)
    assert err.value.key == "cluster.node.gpu"


def test_unknown_link_suggests_the_closest():
    with pytest.raises(InputError, match="nvlink4"):
        get_link("nvlnk4")


def test_non_string_name_is_an_input_error():
    with pytest.raises(InputError):
        get_gpu({"kind": "gpu"})  # type: ignore[arg-type]


def test_inline_gpu_round_trips():
    entry = raw_entries("gpus.yaml")["h100-sxm"]
    assert load_gpu_mapping(entry, name="h100-sxm") == get_gpu("h100-sxm")


def test_inline_gpu_can_change_a_field():
    entry = copy.deepcopy(raw_entries("gpus.yaml")["h100-sxm"])
    entry["memory"] = "94 GiB"
    del entry["source"]  # optional inline
    gpu = load_gpu_mapping(entry, name="h100-nvl", key="cluster.node.gpu")
    assert gpu.memory_bytes == 94 * 2**30
    assert gpu.source  # a placeholder says it was defined inline


def test_inline_link_round_trips():
    entry = raw_entries("links.yaml")["nvswitch-gen3"]
    assert load_link_mapping(entry, name="nvswitch-gen3") == get_link("nvswitch-gen3")


def test_missing_field_names_the_key():
    entry = copy.deepcopy(raw_entries("gpus.yaml")["rtx4090"])
    del entry["bf16"]
    with pytest.raises(InputError, match="bf16") as err:
        load_gpu_mapping(entry, name="my-gpu", key="cluster.node.gpu")
    assert err.value.key == "cluster.node.gpu.bf16"


def test_missing_link_field_names_the_key():
    with pytest.raises(InputError) as err:
        load_link_mapping({"kind": "pcie", "bandwidth": "32 GB/s", "latency": "1 us"},
                          name="x", key="cluster.fabric.link")
    assert err.value.key == "cluster.fabric.link.efficiency"


@pytest.mark.parametrize("field, value, words", [
    ("bf16", "165 TB", "compute"),                # wrong unit
    ("memory_bw", "-5 GB/s", "cannot read"),       # negative
    ("gemm_efficiency", 1.5, "(0, 1]"),            # above 1
    ("arch", "lovelace", "allowed"),
    ("pcie", "pcie-gen9", "pcie-gen"),            # unknown link, suggests a real one
    ("pcie", "nvlink4", "pcie"),                   # a link of the wrong kind
    ("pcie_p2p", "yes", "true or false"),
    ("idle", "500 W", "below tdp"),
    ("source", [], "source"),
])
def test_bad_values_name_field_and_reason(field, value, words):
    entry = copy.deepcopy(raw_entries("gpus.yaml")["rtx4090"])
    entry[field] = value
    with pytest.raises(InputError) as err:
        load_gpu_mapping(entry, name="bad", key="gpu")
    assert err.value.key == f"gpu.{field}"
    assert words in str(err.value)


def test_misspelt_field_is_rejected_with_a_suggestion():
    entry = copy.deepcopy(raw_entries("gpus.yaml")["rtx4090"])
    entry["bf61"] = entry.pop("bf16")
    with pytest.raises(InputError) as err:
        load_gpu_mapping(entry, name="bad", key="gpu")
    assert "bf16" in str(err.value) and err.value.key == "gpu.bf61"


def test_nvlink_bridge_needs_a_gpu_count():
    entry = copy.deepcopy(raw_entries("gpus.yaml")["rtx3090"])
    entry["nvlink_max_gpus"] = 0
    with pytest.raises(InputError, match="nvlink"):
        load_gpu_mapping(entry, name="bad")


def test_in_network_reduction_only_on_switches():
    entry = dict(raw_entries("links.yaml")["nvlink4"], in_network_reduction=True)
    with pytest.raises(InputError, match="nvswitch"):
        load_link_mapping(entry, name="bad")


@given(gbps=st.floats(min_value=0.1, max_value=1e4, allow_nan=False),
       efficiency=st.floats(min_value=1e-3, max_value=1.0))
def test_inline_link_bandwidth_units(gbps, efficiency):
    bytes_link = load_link_mapping({"kind": "roce", "bandwidth": f"{gbps!r} GB/s", "latency": "1 us",
                                    "efficiency": efficiency}, name="b")
    bits_link = load_link_mapping({"kind": "roce", "bandwidth": f"{gbps * 8!r} Gb/s", "latency": "1 us",
                                   "efficiency": efficiency}, name="b")
    assert bytes_link.bw_bytes_per_s == pytest.approx(gbps * GB)
    assert bits_link.bw_bytes_per_s == pytest.approx(bytes_link.bw_bytes_per_s)
    assert bytes_link.effective_bw_bytes_per_s <= bytes_link.bw_bytes_per_s


# ------------------------------------------------------------ parts a 2026 buyer compares (issue 24)

# shared/DESIGN.md, "Contracts added in the second round", Names.
SECOND_ROUND_GPUS = ["a100-40gb-sxm", "a100-80gb-pcie", "h100-nvl", "h200-nvl", "gh200", "gb200", "b300",
                     "l4", "l40", "rtx6000-ada", "rtx-pro-6000", "mi300x", "mi325x", "mi355x"]


@pytest.mark.parametrize("name", SECOND_ROUND_GPUS)
def test_second_round_gpu_names_exist_with_sources(name):
    gpu = get_gpu(name)
    assert gpu.source and gpu.bf16_flop_per_s > gpu.fp32_flop_per_s


def test_second_round_datasheet_peaks():
    # L40 datasheet: BF16 181.05 dense (362.1 sparse), half the L40S's 362.05 at nearly the same clock.
    assert get_gpu("l40").bf16_flop_per_s == pytest.approx(181.05 * TB)
    assert get_gpu("l40").bf16_flop_per_s == pytest.approx(get_gpu("l40s").bf16_flop_per_s / 2, rel=0.01)
    # L4 datasheet: FP16/BF16 242 with sparsity -> 121 dense; 300 GB/s; 72 W.
    assert get_gpu("l4").bf16_flop_per_s == pytest.approx(121 * TB)
    assert get_gpu("l4").tdp_w == 72
    # AMD MI300X: 2100 MHz x 256 FMA x 2 x 1216 matrix cores = 1307.4 TFLOPS dense; 5.3 TB/s; 750 W.
    mi300x = get_gpu("mi300x")
    assert mi300x.bf16_flop_per_s == pytest.approx(2100e6 * 256 * 2 * 1216, rel=1e-3)
    assert mi300x.memory_bw_bytes_per_s == pytest.approx(5300 * GB)
    # MI325X: same compute as MI300X, 256 GB at 6 TB/s; MI355X: 288 GB at 8 TB/s, 1400 W.
    assert get_gpu("mi325x").bf16_flop_per_s == mi300x.bf16_flop_per_s
    assert get_gpu("mi325x").memory_bytes > mi300x.memory_bytes
    assert get_gpu("mi355x").bf16_flop_per_s == pytest.approx(2400e6 * 512 * 2 * 1024, rel=1e-3)
    # RTX PRO 6000 Blackwell: NVIDIA's spec rates (aiconfigurator rtx_pro_6000_server.yaml, scaled there to
    # 2430 MHz) are 1024 dense BF16 FLOP per SM per clock with FP32 accumulate, twice the GeForce RTX 5090's
    # half-rate 512, over 188 SMs at the 2617 MHz boost; FP8 twice BF16.
    pro, rtx5090 = get_gpu("rtx-pro-6000"), get_gpu("rtx5090")
    assert pro.bf16_flop_per_s == pytest.approx(1024 * pro.sms * pro.sm_clock_hz, rel=1e-3)
    assert pro.bf16_flop_per_s / (pro.sms * pro.sm_clock_hz) == pytest.approx(
        2 * rtx5090.bf16_flop_per_s / (rtx5090.sms * rtx5090.sm_clock_hz), rel=0.02)
    assert pro.fp8_flop_per_s == pytest.approx(2 * pro.bf16_flop_per_s)
    # GB200 NVL72: 13.4 TB and 576 TB/s over 72 GPUs; BF16 2.5 PF dense per GPU, above the HGX B200's 2.25.
    gb200 = get_gpu("gb200")
    assert gb200.memory_bw_bytes_per_s * 72 == pytest.approx(576e12)
    assert gb200.bf16_flop_per_s > get_gpu("b200").bf16_flop_per_s
    assert gb200.nvlink_max_gpus == 72
    # A100 80GB PCIe: 1,935 GB/s, 300 W; A100 40GB SXM: 1,555 GB/s, 400 W, NVLink 3 on NVSwitch.
    assert get_gpu("a100-80gb-pcie").memory_bw_bytes_per_s == pytest.approx(1935 * GB)
    assert get_gpu("a100-40gb-sxm").nvlink == "nvlink3"


MICROBENCHMARKS = Path(__file__).parents[2] / "validation" / "microbenchmarks.yaml"


def _measured(gpu: str, quantity: str, shape: str) -> float:
    rows = yaml.safe_load(MICROBENCHMARKS.read_text())
    return next(r["value"] for r in rows if (r["gpu"], r["quantity"], r.get("shape")) == (gpu, quantity, shape))


def test_mi300x_fp8_gemm_rate_is_the_measured_one_at_the_reference_shape():
    # costs/compute.py scales every GEMM from the catalog's rate at REFERENCE_GEMM^3 (8192^3): on MI300X
    # that is Azure's hipBLASLt FP8 8192^3 row, not AMD's Max-Achievable FLOPs (1273 TFLOPS at
    # 4096x3648x32896, a one-wave shape with a long K), which Llama's K = 8192 GEMMs do not reach.
    from scalesim.costs.compute import REFERENCE_GEMM, achieved_peak_flop_per_s
    rate = achieved_peak_flop_per_s(get_gpu("mi300x"), "fp8")
    measured = _measured("mi300x", "gemm_fp8_TFLOPs", f"{REFERENCE_GEMM} x {REFERENCE_GEMM} x {REFERENCE_GEMM}")
    assert rate == pytest.approx(measured * TB, rel=0.01)
    assert rate < 1273 * TB * 0.95


def test_mi325x_fp8_gemm_rate_keeps_the_max_achievable_flops_ratio_to_mi300x():
    # Same compute die and kernels, 1000 W instead of 750 W: AMD's MAF study (rocm-blogs, measuring-max-
    # achievable-flops-part2, Table 1) measures FP8 1519 vs 1273 TFLOPS, 1464 vs 1230 MHz median clock.
    from scalesim.costs.compute import achieved_peak_flop_per_s
    rate = {g: achieved_peak_flop_per_s(get_gpu(g), "fp8") for g in ("mi300x", "mi325x")}
    assert rate["mi325x"] / rate["mi300x"] == pytest.approx(1519 / 1273, rel=0.01)


@pytest.mark.parametrize("gpu, bf16_maf_mhz", [("mi300x", 1207), ("mi325x", 1447)])
def test_amd_parts_train_at_the_clock_amd_measures_under_dense_matrix_work(gpu, bf16_maf_mhz):
    # AMD's Max-Achievable FLOPs study (Table 1): median clock under BF16 GEMMs at the power limit, of the
    # 2100 MHz peak engine clock; the GEMM rates stay the measured ones (mamf-finder bf16 668.4 / 784.9)
    from scalesim.costs.compute import achieved_peak_flop_per_s
    spec = get_gpu(gpu)
    assert spec.training_clock_fraction == pytest.approx(bf16_maf_mhz / 2100, rel=0.001)
    assert achieved_peak_flop_per_s(spec, "bf16") == pytest.approx({"mi300x": 668.4, "mi325x": 784.9}[gpu] * TB,
                                                                    rel=0.002)


def test_framework_streaming_rate_lies_between_pytorchs_cast_copy_and_its_dram_bound_element_wise_ops():
    # costs/compute.py caps memory-bound framework kernels at STREAM_BYTES_PER_SM_CYCLE per SM and clock.
    # Microbenchmarks (validation/microbenchmarks.yaml) bracket it: PyTorch's non-vectorized type-converting
    # copy on A100 (bf16 -> fp32, 6 bytes an element) below, and its vectorized relu on H100 (4 bytes an
    # element) above - which moves the copy kernel's 2.9 TB/s, so it is DRAM-bound and bounds the SM roof
    # from below only.
    from scalesim.costs.compute import STREAM_BYTES_PER_SM_CYCLE

    def per_sm_clock(gpu: str, quantity: str, shape: str, bytes_per_element: int) -> float:
        spec, elements = get_gpu(gpu), int(shape.split()[0].replace(",", ""))
        seconds = _measured(gpu, quantity, shape) * 1e-6
        return elements * bytes_per_element / seconds / (spec.sms * spec.sm_clock_hz)

    cast = per_sm_clock("a100-80gb-sxm", "cast_copy_time_us", "67,108,864 elements (2^26)", 6)
    relu = per_sm_clock("h100-sxm", "elementwise_time_us", "268,435,456 elements (2^28)", 4)
    assert cast < STREAM_BYTES_PER_SM_CYCLE < relu
    relu_bw = 2 ** 28 * 4 / (_measured("h100-sxm", "elementwise_time_us", "268,435,456 elements (2^28)") * 1e-6)
    assert relu_bw == pytest.approx(2900 * GB, rel=0.02)


def test_amd_boards_have_a_link_to_every_peer():
    # MI300X: 7 Infinity Fabric links of 128 GB/s bidirectional = 896 GB/s aggregate.
    xgmi = get_link(get_gpu("mi300x").nvlink)
    assert xgmi.kind == "xgmi"
    assert 7 * 2 * xgmi.bw_bytes_per_s == pytest.approx(896 * GB)


def test_the_built_in_catalog_files_have_no_duplicate_keys():
    # The catalog is parsed with libyaml for speed; the checked loader proves no entry is given twice.
    from importlib import resources

    from scalesim.yaml_load import parse_yaml_text

    for name in ("gpus.yaml", "links.yaml"):
        text = (resources.files("scalesim.hardware") / "data" / name).read_text(encoding="utf-8")
        assert parse_yaml_text(text, file=name)


def test_the_500w_hbm2e_h100_is_never_faster_than_the_700w_part():
    # Same GH100 SXM die (torchtitan's Grand Teton hosts): a lower power limit sustains a lower clock,
    # and HBM2e at 2.4 TB/s moves less than HBM3 at 3.35 TB/s.
    from scalesim.costs.compute import achieved_peak_flop_per_s, streaming_bw_bytes_per_s
    low, sxm = get_gpu("h100-sxm-96gb-500w"), get_gpu("h100-sxm")
    assert low.tdp_w < sxm.tdp_w and low.training_clock_fraction < sxm.training_clock_fraction
    assert achieved_peak_flop_per_s(low, "bf16") < achieved_peak_flop_per_s(sxm, "bf16")
    assert streaming_bw_bytes_per_s(low) <= streaming_bw_bytes_per_s(sxm)
