"""Node designs: what a server holds and how it is wired, as a user writes it.

A design names catalog parts (GPU, links) and counts; `build.py` turns it into
a graph. Designs live in `topologies/*.yaml`, or inline in a scenario under
`cluster.node` (there also `{base: NAME, <fields to change>}`: a shipped design
with, e.g., another GPU). Wherever a design names a GPU or a link it may instead give a
mapping: `{base: NAME, field: value, ...}` (NAME's entry with those fields
changed) or a full entry (scalesim/hardware/user_catalog.py). Names resolve in
the `Catalog` passed in [the built-in one].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic

from scalesim.errors import InputError, unknown_name
from scalesim.hardware.user_catalog import Catalog, builtin_catalog
from scalesim.limits import NODE_LIMITS, check_limits
from scalesim.paths import data_dir
from scalesim.schema import Strict, read_yaml, validate  # noqa: F401  (read_yaml: re-exported)

# A catalog name, or a mapping: {base: NAME, <fields to change>} or a full catalog entry.
Part = str | dict[str, Any]


class HostDesign(Strict):
    # CPU sockets (1 or 2 in a server; a rack such as GB200 NVL72 has one Grace per two GPUs).
    # Beyond two, socket s is cabled to socket s+1 (a chain), used only by host-staged copies.
    sockets: pydantic.PositiveInt = 1
    socket_link: Part = "upi"             # catalog link between CPU sockets
    memory: Part = "ddr5-4800-8ch"        # catalog memory per socket (host-staged copies pass here)
    # CPU vendor, which decides where NCCL allows PCIe peer-to-peer: only below a PCIe switch on Intel
    # and ARM hosts, through the CPUs too on AMD (NVIDIA/nccl src/graph/paths.cc, ncclTopoCheckP2p)
    # [inferred from socket_link: upi* intel, infinity-fabric* amd; see `host_cpu`]
    cpu: Literal["intel", "amd", "arm"] | None = None
    # CPU time to issue one eager PyTorch op on this host's CPU, microseconds [the published
    # measurement in scalesim/costs/host.py]; a faster CPU issues kernels sooner.
    dispatch_us_per_op: pydantic.PositiveFloat | None = None
    memory_gb: pydantic.PositiveFloat | None = None   # host RAM per node (GB); holds ZeRO-Offload's
                                                      # optimizer state [unknown: not checked]


class PcieDesign(Strict):
    link: Part | None = None              # GPU slot link [the GPU's own PCIe generation]
    switches: pydantic.NonNegativeInt = 0 # PCIe switches; 0 = GPUs sit on CPU root ports
    uplink: Part | None = None            # switch-to-CPU link [same as `link`]


class NvlinkDesign(Strict):
    # nvswitch: every GPU's port on one switch fabric (HGX, NVL72); bridge: GPU pairs (0-1, 2-3, ...);
    # mesh: one link between every pair of GPUs (AMD's 8-GPU xGMI boards; `link` is ONE such link).
    fabric: Literal["nvswitch", "bridge", "mesh"] = "nvswitch"
    switch: Part | None = None            # catalog nvswitch generation (for fabric: nvswitch)
    link: Part | None = None              # a GPU's NVLink port [the GPU's catalog NVLink], e.g. a cut-down part


class NicDesign(Strict):
    count: pydantic.NonNegativeInt = 0
    link: Part | None = None              # catalog network link of each NIC (used between nodes)
    attach: Literal["pcie-switch", "host", "gpu"] = "pcie-switch"   # gpu: on the GPU's own I/O, at the NIC's rate


class NodeDesign(Strict):
    name: str
    description: str = ""
    source: list[str] = []
    gpu: Part
    gpus: pydantic.PositiveInt
    p2p: bool | None = None               # PCIe peer-to-peer [the GPU catalog's default]
    host: HostDesign = HostDesign()
    pcie: PcieDesign = PcieDesign()
    nvlink: NvlinkDesign | None = None
    nics: NicDesign = NicDesign()

    @pydantic.model_validator(mode="after")
    def _counts_fit(self) -> "NodeDesign":
        if self.pcie.switches and self.gpus % self.pcie.switches:
            fits = [n for n in range(1, self.gpus + 1) if self.gpus % n == 0 and n % self.host.sockets == 0]
            raise ValueError(f"pcie.switches ({self.pcie.switches}) must divide gpus ({self.gpus}); allowed: 0 "
                             f"(GPUs on the CPUs' root ports), {', '.join(map(str, fits))}")
        if self.pcie.switches % self.host.sockets:
            raise ValueError(f"pcie.switches ({self.pcie.switches}) must be a multiple of host.sockets")
        if self.gpus % self.host.sockets:
            raise ValueError(f"gpus ({self.gpus}) must divide evenly over host.sockets ({self.host.sockets})")
        check_limits(self, NODE_LIMITS)
        return self


def host_cpu(host: HostDesign) -> str:
    """The host CPU's vendor: `host.cpu` as written, else what its socket link says (AMD's Infinity
    Fabric / xGMI, else Intel's UPI, the default socket link)."""
    if host.cpu is not None:
        return host.cpu
    link = host.socket_link if isinstance(host.socket_link, str) else str(host.socket_link.get("base", ""))
    return "amd" if link.startswith("infinity-fabric") else "intel"


def builtin_topology_dir() -> Path:
    """Where the shipped node designs are: the repo's topologies/ or the wheel's bundled copy."""
    return data_dir("topologies")


def builtin_topology_names() -> list[str]:
    return sorted(p.stem for p in builtin_topology_dir().glob("*.yaml"))


def design_parts(design: NodeDesign) -> list[tuple[str, Part]]:
    """(key, name or mapping) of every link the design names; None where it takes a default."""
    parts = [("host.socket_link", design.host.socket_link), ("host.memory", design.host.memory),
             ("pcie.link", design.pcie.link), ("pcie.uplink", design.pcie.uplink), ("nics.link", design.nics.link)]
    if design.nvlink is not None:
        parts += [("nvlink.switch", design.nvlink.switch), ("nvlink.link", design.nvlink.link)]
    return [(k, v) for k, v in parts if v is not None]


# The kinds of link each part of a design may name (host.socket_link: sockets, or a C2C link of kind pcie).
PART_KINDS = {"pcie.link": ("pcie",), "pcie.uplink": ("pcie",), "nics.link": ("infiniband", "roce", "ethernet"),
              "nvlink.switch": ("nvswitch",), "nvlink.link": ("nvlink", "xgmi"), "host.memory": ("memory",)}


def check_catalog_names(design: NodeDesign, *, file: str | None, key: str | None,
                        catalog: Catalog | None = None) -> NodeDesign:
    """Resolve every GPU and link the design names, so a typo is reported where it was written."""
    catalog = catalog or builtin_catalog()
    try:
        catalog.resolve_gpu(design.gpu, key="gpu")
        for field, part in design_parts(design):
            link = catalog.resolve_link(part, key=field)
            kinds = PART_KINDS.get(field, (link.kind,))
            if link.kind not in kinds:      # pcie.link: nvlink4 ran at exit 0, the PCIe tree built of NVLink
                raise InputError(f"must name a {' or '.join(kinds)} link; '{link.name}' is a {link.kind} link",
                                 key=field)
    except InputError as exc:
        raise exc.located(file=file, key_prefix=key if exc.file is None else None) from None
    return design


def design_path(spec: str, scenario_file: str | None) -> Path:
    """A node design path as written: relative to the scenario file that names it (else to the cwd)."""
    path = Path(spec).expanduser()
    if scenario_file and not path.is_absolute():
        return Path(scenario_file).resolve().parent / path
    return path


def load_node_design(spec: str | dict, *, key: str | None = None, file: str | None = None,
                     catalog: Catalog | None = None) -> NodeDesign:
    """A node design from a built-in name, a path to a YAML file, or an inline mapping.

    `file` is the scenario that names it: a relative path resolves against that file's folder.
    """
    if isinstance(spec, dict) and "base" in spec:
        return _derived_design(spec, key=key, file=file, catalog=catalog)
    if isinstance(spec, dict):
        data = dict(spec)
        data.setdefault("name", "inline")
        design = validate(NodeDesign, data, file=file, key_prefix=key, also_allowed=("base",))
        return check_catalog_names(design, file=file, key=key, catalog=catalog)
    if not isinstance(spec, str):
        raise InputError("expected a topology name, a .yaml path or a mapping", file=file, key=key)
    path = design_path(spec, file)
    if path.is_dir():
        raise InputError(f"'{spec}' is a folder; give a node design .yaml file or a built-in name (scalesim "
                         f"topologies lists them)", file=file, key=key)
    if spec.endswith((".yaml", ".yml")) or path.is_file():
        data = read_yaml(path, what=f"topology file (named by key '{key}')" if key and file else "topology file")
        if isinstance(data, dict):
            data.setdefault("name", path.stem)
        return check_catalog_names(validate(NodeDesign, data, file=str(path)), file=str(path), key=None,
                                   catalog=catalog)
    builtin = builtin_topology_dir() / f"{spec}.yaml"
    if not builtin.is_file():
        raise unknown_name("topology", spec, builtin_topology_names(), key=key, file=file)
    design = validate(NodeDesign, read_yaml(builtin), file=str(builtin))
    return check_catalog_names(design, file=str(builtin), key=None, catalog=catalog)


def _derived_design(spec: dict, *, key: str | None, file: str | None, catalog: Catalog | None) -> NodeDesign:
    """`{base: NAME or path, <fields to change>}`: the base design with those fields changed; a
    section given as a mapping (gpu, host, pcie, nvlink, nics) changes only the fields it names."""
    base_key = f"{key}.base" if key else "base"
    if not isinstance(spec["base"], str) or not spec["base"].strip():
        raise InputError("expected a node design's name (scalesim topologies lists them) or a .yaml path",
                         file=file, key=base_key)
    base = load_node_design(spec["base"], key=base_key, file=file, catalog=catalog)
    data = base.model_dump(exclude_unset=True)
    changes = {k: v for k, v in spec.items() if k != "base"}
    for field, value in changes.items():
        section = data.get(field)
        if field == "gpu" and isinstance(section, str) and isinstance(value, dict) and "base" not in value:
            section = {"base": section}         # the base design's GPU with the fields named changed
        data[field] = {**section, **value} if isinstance(section, dict) and isinstance(value, dict) else value
    if "name" not in changes:
        data["name"] = f"{base.name} with {', '.join(sorted(changes)) or 'no change'}"
    if "description" not in changes:
        data["description"] = f"{base.name} ({base.description}) with {changes} changed"
    design = validate(NodeDesign, data, file=file, key_prefix=key, also_allowed=("base",))
    return check_catalog_names(design, file=file, key=key, catalog=catalog)
