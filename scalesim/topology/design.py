"""Node designs: what a server holds and how it is wired, as a user writes it.

A design names catalog parts (GPU, links) and counts; `build.py` turns it into
a graph. Designs live in `topologies/*.yaml`, or inline in a scenario under
`cluster.node`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from scalesim.errors import InputError, unknown_name
from scalesim.hardware import get_gpu, get_link
from scalesim.limits import NODE_LIMITS, check_limits
from scalesim.paths import data_dir
from scalesim.schema import Strict, validate
from scalesim.yaml_load import read_yaml


class HostDesign(Strict):
    sockets: Literal[1, 2] = 1
    socket_link: str = "upi"              # catalog link between CPU sockets
    memory: str = "ddr5-4800-8ch"         # catalog memory per socket (host-staged copies pass here)
    memory_gb: pydantic.PositiveFloat | None = None   # host RAM per node (GB); holds ZeRO-Offload's
                                                      # optimizer state [unknown: not checked]


class PcieDesign(Strict):
    link: str | None = None               # GPU slot link [the GPU's own PCIe generation]
    switches: pydantic.NonNegativeInt = 0 # PCIe switches; 0 = GPUs sit on CPU root ports
    uplink: str | None = None             # switch-to-CPU link [same as `link`]


class NvlinkDesign(Strict):
    fabric: Literal["nvswitch", "bridge"] = "nvswitch"
    switch: str | None = None             # catalog nvswitch generation (for fabric: nvswitch)
    link: str | None = None               # a GPU's NVLink port [the GPU's catalog NVLink], e.g. a cut-down part


class NicDesign(Strict):
    count: pydantic.NonNegativeInt = 0
    link: str | None = None               # catalog network link of each NIC (used between nodes)
    attach: Literal["pcie-switch", "host"] = "pcie-switch"


class NodeDesign(Strict):
    name: str
    description: str = ""
    source: list[str] = []
    gpu: str
    gpus: pydantic.PositiveInt
    p2p: bool | None = None               # PCIe peer-to-peer [the GPU catalog's default]
    host: HostDesign = HostDesign()
    pcie: PcieDesign = PcieDesign()
    nvlink: NvlinkDesign | None = None
    nics: NicDesign = NicDesign()

    @pydantic.model_validator(mode="after")
    def _counts_fit(self) -> "NodeDesign":
        if self.pcie.switches and self.gpus % self.pcie.switches:
            raise ValueError(f"pcie.switches ({self.pcie.switches}) must divide gpus ({self.gpus})")
        if self.pcie.switches % self.host.sockets:
            raise ValueError(f"pcie.switches ({self.pcie.switches}) must be a multiple of host.sockets")
        if self.gpus % self.host.sockets:
            raise ValueError(f"gpus ({self.gpus}) must divide evenly over host.sockets ({self.host.sockets})")
        check_limits(self, NODE_LIMITS)
        return self


def builtin_topology_dir() -> Path:
    """Where the shipped node designs are: the repo's topologies/ or the wheel's bundled copy."""
    return data_dir("topologies")


def builtin_topology_names() -> list[str]:
    return sorted(p.stem for p in builtin_topology_dir().glob("*.yaml"))


def check_catalog_names(design: NodeDesign, *, file: str | None, key: str | None) -> NodeDesign:
    """Resolve every catalog name the design uses, so a typo is reported where it was written."""
    names = [("gpu", design.gpu, get_gpu), ("host.socket_link", design.host.socket_link, get_link),
             ("host.memory", design.host.memory, get_link), ("pcie.link", design.pcie.link, get_link),
             ("pcie.uplink", design.pcie.uplink, get_link), ("nics.link", design.nics.link, get_link)]
    if design.nvlink is not None:
        names.append(("nvlink.switch", design.nvlink.switch, get_link))
        names.append(("nvlink.link", design.nvlink.link, get_link))
    for field, name, lookup in names:
        if name is None:
            continue
        try:
            lookup(name, key=field)
        except InputError as exc:
            raise exc.located(file=file, key_prefix=key) from None
    return design


def load_node_design(spec: str | dict, *, key: str | None = None, file: str | None = None) -> NodeDesign:
    """A node design from a built-in name, a path to a YAML file, or an inline mapping."""
    if isinstance(spec, dict):
        data = dict(spec)
        data.setdefault("name", "inline")
        design = validate(NodeDesign, data, file=file, key_prefix=key)
        return check_catalog_names(design, file=file, key=key)
    if not isinstance(spec, str):
        raise InputError("expected a topology name, a .yaml path or a mapping", file=file, key=key)
    path = Path(spec)
    if spec.endswith((".yaml", ".yml")) or path.is_file():
        data = read_yaml(path, what="topology file")
        if isinstance(data, dict):
            data.setdefault("name", path.stem)
        return check_catalog_names(validate(NodeDesign, data, file=str(path)), file=str(path), key=None)
    builtin = builtin_topology_dir() / f"{spec}.yaml"
    if not builtin.is_file():
        raise unknown_name("topology", spec, builtin_topology_names(), key=key, file=file)
    design = validate(NodeDesign, read_yaml(builtin), file=str(builtin))
    return check_catalog_names(design, file=str(builtin), key=None)
