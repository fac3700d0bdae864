"""The hardware catalog: GPUs and links, loaded from YAML shipped in the package.

``data/gpus.yaml`` and ``data/links.yaml`` hold quantities with their units
("989.4 TFLOPS", "450 GB/s", "80 GiB") and a ``source:`` for every entry. This
module parses them once, with ``scalesim.units``, into frozen ``GpuSpec`` and
``LinkSpec`` in SI units, so nothing downstream ever sees a unit string.

Users can also define a GPU or a link inline in a scenario, with the same
fields as the YAML (``load_gpu_mapping`` / ``load_link_mapping``). Every mistake
raises ``InputError`` naming the entry and the field.

>>> get_gpu("h100-sxm").bf16_flop_per_s      # dense, not the 1978.9 sparse figure
989400000000000.0
>>> get_link("nvlink4").bw_bytes_per_s       # per direction, not the 900 GB/s bidirectional
450000000000.0
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from scalesim.errors import InputError, unknown_name
from scalesim.hardware.plausible import check_plausible
from scalesim.hardware.specs import GpuSpec, LinkSpec
from scalesim.units import parse_bandwidth, parse_bytes, parse_flops, parse_time

ARCHS = ("ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4")
NETWORK_LINK_KINDS = ("infiniband", "roce", "ethernet")
LINK_KINDS = ("pcie", "nvlink", "nvswitch", "xgmi", "socket", "infiniband", "roce", "ethernet", "memory")
# Kinds a GPU's scale-up port (`nvlink` field) may be: NVLink, or AMD's Infinity Fabric (xGMI).
SCALE_UP_KINDS = ("nvlink", "xgmi")

_GPUS_FILE = "scalesim/hardware/data/gpus.yaml"
_LINKS_FILE = "scalesim/hardware/data/links.yaml"

# Documentation-only keys an entry may carry; they do not reach the spec.
_DOC_FIELDS = ("notes", "estimated")


# ---------------------------------------------------------------- public API

def gpus() -> dict[str, GpuSpec]:
    """All catalog GPUs by id, in file order (a new dict; the specs are frozen and shared)."""
    return dict(_gpu_table())


def links() -> dict[str, LinkSpec]:
    """All catalog links by id, in file order (a new dict; the specs are frozen and shared)."""
    return dict(_link_table())


def catalog_notes(name: str) -> dict[str, list[str]]:
    """What the catalog says of an entry beyond its numbers: its `notes` (how a value was
    measured, estimated or fitted) and the fields it marks `estimated`. Empty for a name
    the catalog does not hold."""
    for filename, shown_as in (("gpus.yaml", _GPUS_FILE), ("links.yaml", _LINKS_FILE)):
        entry = _raw_entries(filename, shown_as).get(name)
        if isinstance(entry, Mapping):
            return {"notes": [str(n) for n in entry.get("notes", [])],
                    "estimated": [str(f) for f in entry.get("estimated", [])]}
    return {"notes": [], "estimated": []}


def get_gpu(name: str, *, key: str | None = None) -> GpuSpec:
    """The catalog GPU ``name``; an unknown name raises InputError suggesting the closest."""
    return _lookup("GPU", name, _gpu_table(), key)


def get_link(name: str, *, key: str | None = None) -> LinkSpec:
    """The catalog link ``name``; an unknown name raises InputError suggesting the closest."""
    return _lookup("link", name, _link_table(), key)


def load_gpu_mapping(mapping: Mapping, *, name: str, key: str | None = None, file: str | None = None,
                     link_table: Mapping[str, LinkSpec] | None = None) -> GpuSpec:
    """A GPU defined inline in a scenario (or a user's catalog folder), with the fields of ``gpus.yaml``.

    ``source`` is optional inline (a user's own card may have none); every other
    field is required, so a copied catalog entry is the easiest starting point.
    ``key`` is where the mapping sits in the scenario (e.g. ``cluster.node.gpu``)
    and prefixes the key of any error. Its ``nvlink`` and ``pcie`` name links of
    ``link_table`` [the built-in links].
    """
    return _gpu_from_mapping(mapping, name=name, where=_Where(file, key or name), inline=True,
                             link_table=link_table)


def load_link_mapping(mapping: Mapping, *, name: str, key: str | None = None, file: str | None = None) -> LinkSpec:
    """A link defined inline in a scenario (or a user's catalog folder), with the fields of ``links.yaml``.

    ``source`` and ``description`` are optional inline; the rest are required.
    """
    return _link_from_mapping(mapping, name=name, where=_Where(file, key or name), inline=True)


# ---------------------------------------------------------------- loading

@functools.cache
def _gpu_table() -> dict[str, GpuSpec]:
    data = _raw_entries("gpus.yaml", _GPUS_FILE)
    return {name: _gpu_from_mapping(entry, name=name, where=_Where(_GPUS_FILE, str(name)), inline=False)
            for name, entry in data.items()}


@functools.cache
def _link_table() -> dict[str, LinkSpec]:
    data = _raw_entries("links.yaml", _LINKS_FILE)
    return {name: _link_from_mapping(entry, name=name, where=_Where(_LINKS_FILE, str(name)), inline=False)
            for name, entry in data.items()}


@functools.cache
def _raw_entries(filename: str, shown_as: str) -> dict:
    """The catalog file as written (notes included), read once per process: the spec
    tables and `catalog_notes` both come from it."""
    return _read_yaml(filename, shown_as)


def _read_yaml(filename: str, shown_as: str) -> dict:
    text = (resources.files("scalesim.hardware") / "data" / filename).read_text(encoding="utf-8")
    # The built-in catalog is our own data (tests/hardware check it through the checked loader for
    # duplicate keys): libyaml's loader when PyYAML has it, the same data about ten times faster.
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    if not isinstance(data, dict) or not data:
        raise InputError("expected a non-empty mapping of catalog ids to entries", file=shown_as)
    return data


def _lookup(kind: str, name: Any, table: Mapping, key: str | None, alternative: str = ""):
    """table[name], or an InputError naming the key and the names allowed (`alternative`: what
    else the key accepts, for the message)."""
    if not isinstance(name, str):
        raise InputError(f"expected a {kind} name (a string){alternative}, got {name!r}", key=key)
    if name not in table:
        raise unknown_name(kind, name, table, key=key, also="" if not alternative else
                           f"; or your own: a mapping {{base: NAME, <fields to change>}}, or an entry in a "
                           f"--catalog folder's {'gpus' if kind == 'GPU' else 'links'}.yaml")
    return table[name]


# ---------------------------------------------------------------- entries

@dataclass(frozen=True)
class _Where:
    """Where an entry lives, so an error can name the file and the key path."""

    file: str | None
    key: str

    def error(self, field: str | None, message: str) -> InputError:
        return InputError(message, file=self.file, key=f"{self.key}.{field}" if field else self.key)


def _gpu_from_mapping(mapping: Any, *, name: Any, where: _Where, inline: bool,
                      link_table: Mapping[str, LinkSpec] | None = None) -> GpuSpec:
    if not isinstance(name, str) or not name:
        raise where.error(None, f"a GPU id must be a non-empty string, got {name!r}")
    read = _Reader(mapping, where, _GPU_FIELDS,
                   optional=("source", "sms", "fp8_gemm_efficiency", "fp32_gemm_efficiency", "boost_clock_mhz",
                             "training_clock_fraction", "gemm_k_overhead", "read_bw_efficiency")
                   if inline else ("fp8_gemm_efficiency", "fp32_gemm_efficiency", "boost_clock_mhz",
                                   "training_clock_fraction", "gemm_k_overhead", "read_bw_efficiency"))
    table = _link_table() if link_table is None else link_table
    nvlink = read("nvlink", _nullable(_link_name("nvlink", SCALE_UP_KINDS, table)))
    nvlink_max_gpus = read("nvlink_max_gpus", _count)
    if (nvlink is None) != (nvlink_max_gpus == 0):
        raise where.error("nvlink_max_gpus", "must be 0 exactly when nvlink is null "
                          f"(nvlink: {nvlink}, nvlink_max_gpus: {nvlink_max_gpus})")
    tdp_w = read("tdp", _positive(_parse_watts))
    idle_w = read("idle", _positive(_parse_watts))
    if idle_w >= tdp_w:
        raise where.error("idle", f"idle draw ({idle_w:g} W) must be below tdp ({tdp_w:g} W)")
    return GpuSpec(
        name=name,
        full_name=read("full_name", _text),
        arch=read("arch", _choice(ARCHS)),
        fp32_flop_per_s=read("fp32", _positive(parse_flops)),
        tf32_flop_per_s=read("tf32", _positive(parse_flops)),
        fp16_flop_per_s=read("fp16", _positive(parse_flops)),
        bf16_flop_per_s=read("bf16", _positive(parse_flops)),
        fp8_flop_per_s=read("fp8", _nullable(_positive(parse_flops))),
        int8_op_per_s=read("int8", _nullable(_positive(_parse_ops))),
        memory_bytes=read("memory", _positive(parse_bytes)),
        memory_bw_bytes_per_s=read("memory_bw", _positive(parse_bandwidth)),
        nvlink=nvlink,
        nvlink_max_gpus=nvlink_max_gpus,
        pcie=read("pcie", _link_name("pcie", ("pcie",), table)),
        pcie_p2p=read("pcie_p2p", _bool),
        tdp_w=tdp_w,
        idle_w=idle_w,
        ecc=read("ecc", _nullable(_bool)),
        mig=read("mig", _bool),
        list_price_usd=read("list_price_usd", _nullable(_non_negative)),
        cloud_usd_per_gpu_hour=read("cloud_usd_per_gpu_hour", _nullable(_non_negative)),
        gemm_efficiency=read("gemm_efficiency", _fraction),
        memory_bw_efficiency=read("memory_bw_efficiency", _fraction),
        source=read("source", _sources, default=("inline definition",)),
        sms=read("sms", _count, default=0),
        fp8_gemm_efficiency=read("fp8_gemm_efficiency", _fraction),
        fp32_gemm_efficiency=read("fp32_gemm_efficiency", _fraction),
        sm_clock_hz=read("boost_clock_mhz", _positive(_number), default=0.0) * 1e6,
        training_clock_fraction=read("training_clock_fraction", _fraction, default=1.0),
        gemm_k_overhead=read("gemm_k_overhead", _non_negative, default=0.0),
        read_bw_efficiency=read("read_bw_efficiency", _fraction),
    )


def _link_from_mapping(mapping: Any, *, name: Any, where: _Where, inline: bool) -> LinkSpec:
    if not isinstance(name, str) or not name:
        raise where.error(None, f"a link id must be a non-empty string, got {name!r}")
    read = _Reader(mapping, where, _LINK_FIELDS,
                   optional=("source", "description", "in_network_reduction", "net_plugin_latency", "nvls_pipeline_fill")
                   if inline else ("in_network_reduction", "net_plugin_latency", "nvls_pipeline_fill"))
    kind = read("kind", _choice(LINK_KINDS))
    reduction = read("in_network_reduction", _bool, default=False)
    if reduction and kind != "nvswitch":
        raise where.error("in_network_reduction", f"only an nvswitch reduces in the network, not a {kind} link")
    plugin = read("net_plugin_latency", _non_negative_time, default=0.0)
    if plugin and kind not in NETWORK_LINK_KINDS:
        raise where.error("net_plugin_latency", f"only a network link ({', '.join(NETWORK_LINK_KINDS)}) "
                          f"goes through an NCCL net plugin, not a {kind} link")
    fill = read("nvls_pipeline_fill", _non_negative, default=0.0)
    if fill and not reduction:
        raise where.error("nvls_pipeline_fill", "only an nvswitch with in_network_reduction runs NVLS")
    return LinkSpec(
        name=name,
        kind=kind,
        bw_bytes_per_s=read("bandwidth", _positive(parse_bandwidth)),
        latency_s=read("latency", _non_negative_time),
        efficiency=read("efficiency", _fraction),
        description=read("description", _text, default="inline definition"),
        source=read("source", _sources, default=("inline definition",)),
        in_network_reduction=reduction,
        net_plugin_latency_s=plugin,
        nvls_pipeline_fill=fill,
    )


# YAML field names (the spec fields they fill are named in the builders above).
_GPU_FIELDS = ("full_name", "sms", "boost_clock_mhz", "fp8_gemm_efficiency", "fp32_gemm_efficiency",
               "arch", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "memory",
               "memory_bw", "nvlink", "nvlink_max_gpus", "pcie", "pcie_p2p", "tdp", "idle", "ecc",
               "mig", "list_price_usd", "cloud_usd_per_gpu_hour", "gemm_efficiency",
               "memory_bw_efficiency", "training_clock_fraction", "gemm_k_overhead", "read_bw_efficiency", "source")
_LINK_FIELDS = ("kind", "bandwidth", "latency", "efficiency", "description", "source",
                "in_network_reduction", "net_plugin_latency", "nvls_pipeline_fill")


class _Reader:
    """Reads the fields of one entry; every failure names the entry and the field."""

    def __init__(self, mapping: Any, where: _Where, fields: tuple[str, ...], optional: tuple[str, ...]):
        if not isinstance(mapping, Mapping):
            raise where.error(None, f"expected a mapping of fields, got {type(mapping).__name__}")
        allowed = fields + _DOC_FIELDS
        for field in mapping:
            if field not in allowed:
                raise unknown_name("field", field, allowed, key=f"{where.key}.{field}", file=where.file)
        estimated = mapping.get("estimated", [])
        if not isinstance(estimated, list) or any(f not in fields for f in estimated):
            raise where.error("estimated", f"must be a list of field names from: {', '.join(fields)}")
        notes = mapping.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise where.error("notes", f"must be a list of texts (how a value was found), got {notes!r}")
        self._mapping, self._where, self._optional = mapping, where, optional

    def __call__(self, field: str, parse: Callable[[Any], Any], *, default: Any = None) -> Any:
        if field not in self._mapping:
            if field in self._optional:
                return default
            raise self._where.error(field, f"missing required field '{field}'")
        try:
            value = parse(self._mapping[field])
            if isinstance(value, float) and not math.isfinite(value):      # .inf, .nan: every result would be too
                raise InputError(f"must be a finite number, got {self._mapping[field]!r}")
            check_plausible(field, value)
        except InputError as err:
            raise self._where.error(field, err.detail) from None
        return value


# ---------------------------------------------------------------- value parsers
# Each takes the raw YAML value and returns the SI value or raises InputError.

def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {value!r}")
    return float(value)


def _positive(parse: Callable[[Any], float]) -> Callable[[Any], float]:
    def parse_positive(value: Any) -> float:
        result = parse(value)
        if not result > 0:
            raise InputError(f"must be positive, got {value!r}")
        return result
    return parse_positive


def _nullable(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else parse(value)


def _non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise InputError(f"must not be negative, got {value!r}")
    return number


def _non_negative_time(value: Any) -> float:
    seconds = parse_time(value)
    if seconds < 0:
        raise InputError(f"must not be negative, got {value!r}")
    return seconds


def _fraction(value: Any) -> float:
    """An achieved fraction of a peak: in (0, 1]."""
    number = _number(value)
    if not 0 < number <= 1:
        raise InputError(f"must be a fraction in (0, 1], got {value!r}")
    return number


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"expected a whole number >= 0, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"expected non-empty text, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse_choice(value: Any) -> str:
        if value not in options:
            raise InputError(f"got {value!r}; allowed: {', '.join(options)}")
        return value
    return parse_choice


def _sources(value: Any) -> tuple[str, ...]:
    """Where the numbers come from: a non-empty list of non-empty strings."""
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s.strip() for s in value):
        raise InputError("expected a non-empty list of sources (text)")
    return tuple(value)


def _link_name(field: str, kinds: tuple[str, ...], table: Mapping[str, LinkSpec]) -> Callable[[Any], str]:
    """A catalog link id of one of ``kinds`` (a GPU's NVLink or PCIe port)."""
    def parse_link_name(value: Any) -> str:
        if not isinstance(value, str) or value not in table:
            raise unknown_name("link", value, [n for n, s in table.items() if s.kind in kinds])
        if table[value].kind not in kinds:
            raise InputError(f"{field} must name a {' or '.join(kinds)} link; '{value}' is a {table[value].kind} link")
        return value
    return parse_link_name


def _parse_watts(value: Any) -> float:
    """Power in watts from '450 W', '1.2 kW' or a bare number (watts)."""
    if isinstance(value, str):
        text = value.strip()
        for suffix, scale in (("kW", 1e3), ("W", 1.0)):
            if text.endswith(suffix):
                return _number_text(text[: -len(suffix)], value) * scale
        return _number_text(text, value)
    return _number(value)


def _parse_ops(value: Any) -> float:
    """Integer operations per second from '624 TOPS' (tera-ops), as parse_flops reads FLOPS."""
    if isinstance(value, str) and value.strip().upper().endswith("OPS"):
        value = value.strip()[:-3] + "FLOPS"
    return parse_flops(value)


def _number_text(text: str, original: Any) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"cannot read {original!r} as a power (e.g. '450 W')") from None
