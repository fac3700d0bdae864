"""Your own hardware: `base:` overrides, full entries, catalog folders layered over the built-in one."""

import pytest

from scalesim.app.collective_bench import time_collective
from scalesim.errors import InputError
from scalesim.hardware import get_gpu, get_link
from scalesim.hardware.user_catalog import BUILTIN, builtin_catalog, catalog_dirs, catalog_for, load_catalog
from scalesim.topology import build_cluster, load_node_design

GiB = 2**30


def write(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


def test_base_with_an_override_changes_that_field_only():
    base = get_gpu("a100-40gb-pcie")
    card = builtin_catalog().resolve_gpu({"base": "a100-40gb-pcie", "memory_gb": 80})
    assert card.memory_bytes == 80 * GiB
    assert (card.bf16_flop_per_s, card.memory_bw_bytes_per_s, card.pcie, card.nvlink, card.tdp_w) == (
        base.bf16_flop_per_s, base.memory_bw_bytes_per_s, base.pcie, base.nvlink, base.tdp_w)
    assert "a100-40gb-pcie" in card.source[0] and "memory" in card.source[0]


def test_a_full_entry_needs_no_base():
    fields = {"full_name": "Lab card", "arch": "ada", "fp32": "50 TFLOPS", "tf32": "50 TFLOPS",
              "fp16": "100 TFLOPS", "bf16": "100 TFLOPS", "fp8": None, "int8": None, "memory": "20 GiB",
              "memory_bw": "500 GB/s", "nvlink": None, "nvlink_max_gpus": 0, "pcie": "pcie-gen4",
              "pcie_p2p": True, "tdp": "200 W", "idle": "30 W", "ecc": None, "mig": False,
              "list_price_usd": None, "cloud_usd_per_gpu_hour": None, "gemm_efficiency": 0.8,
              "memory_bw_efficiency": 0.8, "name": "lab-card"}
    card = builtin_catalog().resolve_gpu(fields, key="cluster.node.gpu")
    assert card.name == "lab-card" and card.bf16_flop_per_s == 100e12


def test_a_folder_entry_takes_precedence_and_names_its_file(tmp_path):
    folder = write(tmp_path / "mine", "links.yaml", "nvlink4: {base: nvlink4, efficiency: 0.9}\n")
    write(folder, "gpus.yaml", "my-h100: {base: h100-sxm, memory_gb: 96}\n")
    catalog = load_catalog([folder])
    assert catalog.link("nvlink4").efficiency == 0.9
    assert get_link("nvlink4").efficiency != 0.9            # the built-in catalog is untouched
    assert catalog.gpu("my-h100").memory_bytes == 96 * GiB
    assert catalog.origin("nvlink4") == str(folder / "links.yaml")
    assert catalog.origin("h100-sxm") == BUILTIN


def test_later_folders_win_and_a_folder_gpu_may_name_a_folder_link(tmp_path):
    first = write(tmp_path / "a", "links.yaml", "fast-link: {base: nvlink4, bandwidth: '500 GB/s'}\n")
    write(first, "gpus.yaml", "card: {base: h100-sxm, nvlink: fast-link}\n")
    second = write(tmp_path / "b", "links.yaml", "fast-link: {base: nvlink4, bandwidth: '600 GB/s'}\n")
    catalog = load_catalog([first, second])
    assert catalog.link("fast-link").bw_bytes_per_s == 600e9
    assert catalog.gpu("card").nvlink == "fast-link"


def test_environment_folders_come_before_the_options():
    dirs = catalog_dirs(["opt"], env={"SCALESIM_CATALOG": "env1:env2"})
    assert [str(d) for d in dirs] == ["env1", "env2", "opt"]
    assert catalog_for([], env={}) is None                  # nothing named: the built-in catalog


def test_catalogs_are_values(tmp_path):
    folder = write(tmp_path / "mine", "gpus.yaml", "x: {base: l40s, memory_gb: 96}\n")
    assert load_catalog([folder]) == load_catalog([folder])
    assert hash(load_catalog([folder])) == hash(load_catalog([folder]))


@pytest.mark.parametrize("text, key", [
    ("x: {base: h100-sxn}\n", "x.base"),
    ("x: {base: h100-sxm, memory_gb: -1}\n", "x.memory_gb"),
    ("x: {base: h100-sxm, gemm_efficiency: 1.5}\n", "x.gemm_efficiency"),
    ("x: {base: h100-sxm, tdpp: 10}\n", "x.tdpp"),
    # fuzz15: no quantity is infinite or NaN (inf FLOP/s ran at rc 0, inf gemm_k_overhead divided by zero)
    ("x: {base: h100-sxm, bf16: .inf}\n", "x.bf16"),
    ("x: {base: h100-sxm, bf16: '1e400 TFLOPS'}\n", "x.bf16"),
    ("x: {base: h100-sxm, memory_bw: .inf}\n", "x.memory_bw"),
    ("x: {base: h100-sxm, gemm_k_overhead: .inf}\n", "x.gemm_k_overhead"),
    ("x: {base: h100-sxm, gemm_k_overhead: .nan}\n", "x.gemm_k_overhead"),
    ("x: {base: h100-sxm, list_price_usd: .nan}\n", "x.list_price_usd"),
    ("x: {base: h100-sxm, cloud_usd_per_gpu_hour: .inf}\n", "x.cloud_usd_per_gpu_hour"),
    ("x: {base: h100-sxm, memory_gb: .nan}\n", "x.memory_gb"),
    ("x: {base: h100-sxm, memory_gb: .inf}\n", "x.memory_gb"),
    ("x: {base: h100-sxm, memory: '1e300 GiB'}\n", "x.memory"),     # inf once scaled by its unit
    ("x: {base: h100-sxm, notes: 5}\n", "x.notes"),           # was a TypeError traceback
    ("x: {base: h100-sxm, notes: [1]}\n", "x.notes"),
    ("x: {base: null, memory_gb: 80}\n", "x.base"),
    ("~: {base: h100-sxm}\n", "None"),                       # ran at exit 0 as a GPU named 'None'
    ("yes: {base: h100-sxm}\n", "True"),       # was read as a full entry: 'missing field nvlink'
])
def test_mistakes_in_a_folder_name_the_file_and_key(tmp_path, text, key):
    folder = write(tmp_path / "bad", "gpus.yaml", text)
    with pytest.raises(InputError) as err:
        load_catalog([folder])
    assert err.value.key == key and err.value.file == str(folder / "gpus.yaml")


def test_a_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_catalog([tmp_path / "nope"])


def test_a_more_efficient_link_is_never_slower(tmp_path):
    design = load_node_design("dgx-h100")
    folder = write(tmp_path / "fast", "links.yaml", "nvlink4: {base: nvlink4, efficiency: 0.95}\n")
    plain = time_collective(build_cluster(design), "all_reduce", 8, 2**30, algo="ring")
    faster = time_collective(build_cluster(design, catalog=load_catalog([folder])), "all_reduce", 8, 2**30,
                             algo="ring")
    assert faster.time_s < plain.time_s


@pytest.mark.parametrize("field", ["bandwidth: .inf", "latency: .nan", "net_plugin_latency: .inf", "nvls_pipeline_fill: .nan"])
def test_a_link_with_an_infinite_or_nan_quantity_names_the_field(tmp_path, field):
    folder = write(tmp_path / "bad", "links.yaml", f"x: {{base: ib-ndr, {field}}}\n")
    with pytest.raises(InputError, match="finite") as err:
        load_catalog([folder])
    assert err.value.key == f"x.{field.split(':')[0]}" and err.value.file == str(folder / "links.yaml")


def test_an_inline_gpu_whose_name_is_not_text_names_the_key():
    """fuzz15: {base: rtx4090, name: [1]} ran at exit 0 as a GPU named '[1]'."""
    with pytest.raises(InputError, match="non-empty string") as err:
        builtin_catalog().resolve_gpu({"base": "rtx4090", "name": [1]}, key="cluster.node.gpu")
    assert err.value.key == "cluster.node.gpu.name"


@pytest.mark.parametrize("file, text, key", [
    # fuzz15: each made a step of ~1e300 s whose energy and cost overflowed: `Infinity` in run --json
    ("gpus.yaml", "x: {base: h100-sxm, bf16: '1e-300 TFLOPS'}\n", "x.bf16"),
    ("gpus.yaml", "x: {base: h100-sxm, gemm_efficiency: 1.0e-300}\n", "x.gemm_efficiency"),
    ("gpus.yaml", "x: {base: h100-sxm, gemm_k_overhead: 1.0e+300}\n", "x.gemm_k_overhead"),
    ("gpus.yaml", "x: {base: h100-sxm, tdp: 1.0e+300}\n", "x.tdp"),
    ("gpus.yaml", "x: {base: h100-sxm, memory: 1.0e-300}\n", "x.memory"),      # headroom -Infinity
    ("links.yaml", "x: {base: nvlink4, bandwidth: '1e-300 GB/s'}\n", "x.bandwidth"),
    ("links.yaml", "x: {base: ib-ndr, latency: 100000}\n", "x.latency"),
])
def test_a_number_far_outside_any_real_part_names_the_field_and_the_bound(tmp_path, file, text, key):
    folder = write(tmp_path / "bad", file, text)
    with pytest.raises(InputError, match="limit of") as err:
        load_catalog([folder])
    assert err.value.key == key and err.value.file == str(folder / file)



@pytest.mark.parametrize("text, key", [("nvlink4: {base: ib-ndr}\n", "nvlink4.base"),
                                       ("nvlink4: {base: nvlink4, kind: infiniband}\n", "nvlink4.kind")])
def test_an_entry_replacing_a_catalog_link_keeps_its_kind(tmp_path, text, key):
    """fuzz15: nvlink4 replaced by an InfiniBand entry ran at exit 0, every H100's NVLink port an IB link."""
    folder = write(tmp_path / "bad", "links.yaml", text)
    with pytest.raises(InputError, match="keeps its kind") as err:
        load_catalog([folder])
    assert err.value.key == key and err.value.file == str(folder / "links.yaml")
    load_catalog([write(tmp_path / "ok", "links.yaml", "my-ib: {base: ib-ndr}\nnvlink4: {base: nvlink4, efficiency: 0.8}\n")])
