"""`cluster.node: {base: NAME, <fields>}`: a shipped design with some fields changed (8x RTX 5090
in the 4090 server), the rest as the base has it; sections change only the fields they name."""

import pytest

from scalesim.errors import InputError
from scalesim.topology import load_node_design


def test_a_derived_design_changes_only_what_it_names():
    base = load_node_design("rtx4090-pcie-8")
    derived = load_node_design({"base": "rtx4090-pcie-8", "gpu": "rtx5090", "host": {"memory_gb": 256}},
                               key="cluster.node")
    assert derived.gpu == "rtx5090" and base.gpu == "rtx4090"
    assert derived.host.memory_gb == 256 and base.host.memory_gb is None
    # the host's other fields, the PCIe tree, the NICs and P2P are the base's
    assert derived.host.sockets == base.host.sockets and derived.host.socket_link == base.host.socket_link
    assert derived.pcie == base.pcie and derived.nics == base.nics and derived.p2p == base.p2p
    assert "rtx4090-pcie-8" in derived.name and "gpu" in derived.name


@pytest.mark.parametrize("spec, key", [({"base": "rtx4090-pcie-9"}, "cluster.node.base"),
                                       ({"base": 3}, "cluster.node.base"),
                                       ({"base": "rtx4090-pcie-8", "gpu": "rtx5909"}, "cluster.node.gpu"),
                                       ({"base": "rtx4090-pcie-8", "gpuz": 2}, "cluster.node.gpuz")])
def test_a_bad_derived_design_names_the_key(spec, key):
    with pytest.raises(InputError) as err:
        load_node_design(spec, key="cluster.node", file="s.yaml")
    assert err.value.key == key and err.value.file == "s.yaml"


@pytest.mark.parametrize("spec", [{"gpu": "h100-sxm", "gpus": 8, "colour": "red"},
                                  {"base": "dgx-h100", "colour": "red"}])
def test_an_unknown_key_in_an_inline_node_lists_base_among_the_allowed(spec):
    # `base` is read before the design's own fields are validated: the list must still offer it
    with pytest.raises(InputError) as err:
        load_node_design(spec, key="cluster.node", file="s.yaml")
    allowed = str(err.value).split("Allowed here: ")[1].split(", ")
    assert err.value.key == "cluster.node.colour" and "base" in allowed and "gpu" in allowed


def test_a_misspelt_base_is_pointed_to_it():
    with pytest.raises(InputError, match="Did you mean 'base'"):
        load_node_design({"bsae": "dgx-h100", "gpu": "rtx5090", "gpus": 8}, key="cluster.node", file="s.yaml")


def test_a_gpu_mapping_without_base_changes_the_base_designs_gpu():
    # {base: dgx-h100, gpu: {tdp: 500 W}}: DGX H100 with its H100s capped at 500 W, as a host or pcie
    # mapping changes only the fields it names (it was refused: "missing required field 'nvlink'")
    from scalesim.topology import build_cluster
    derived = load_node_design({"base": "dgx-h100", "gpu": {"tdp": "500 W"}}, key="cluster.node")
    stock, capped = (build_cluster(load_node_design("dgx-h100")).gpu_spec, build_cluster(derived).gpu_spec)
    assert capped.tdp_w == 500 and stock.tdp_w == 700
    assert capped.bf16_flop_per_s == stock.bf16_flop_per_s and capped.nvlink == stock.nvlink


@pytest.mark.parametrize("base", ["", "  "])
def test_an_empty_base_is_refused_as_a_missing_name_not_as_a_folder(base):
    with pytest.raises(InputError) as err:
        load_node_design({"base": base}, key="cluster.node", file="s.yaml")
    assert err.value.key == "cluster.node.base" and "folder" not in str(err.value)


@pytest.mark.parametrize("spec", [{"name": "x", "gpu": None, "gpus": 8, "pcie": {"link": "pcie-gen4"}},
                                  {"base": "dgx-h100", "gpu": None}])
def test_a_null_gpu_names_the_key_without_pydantics_union_tag(spec):
    # a `str | dict[str, Any]` field: pydantic tags the dict branch 'dict[str,any]', not a key of the file
    with pytest.raises(InputError) as err:
        load_node_design(spec, key="cluster.node", file="s.yaml")
    assert err.value.key == "cluster.node.gpu"


@pytest.mark.parametrize("change, key", [({"pcie": {"link": "nvlink4"}}, "cluster.node.pcie.link"),
                                         ({"nics": {"count": 8, "link": "pcie-gen4"}}, "cluster.node.nics.link"),
                                         ({"host": {"memory": "ib-ndr"}}, "cluster.node.host.memory")])
def test_a_part_naming_a_link_of_another_kind_names_the_key(change, key):
    """fuzz15: pcie.link: nvlink4 ran at exit 0, the PCIe tree built of NVLink links (the fabric's link was checked,
    a design's parts were not)."""
    with pytest.raises(InputError, match="must name a") as err:
        load_node_design({"base": "rtx4090-pcie-8", **change}, key="cluster.node", file="s.yaml")
    assert err.value.key == key and err.value.file == "s.yaml"
