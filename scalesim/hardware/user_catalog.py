"""Your own hardware: the built-in catalog plus folders of your entries, and GPUs/links written inline.

A catalog folder (``--catalog DIR`` or ``SCALESIM_CATALOG``) holds ``gpus.yaml``
and/or ``links.yaml`` with entries shaped like the built-in ones. An entry
there, or a GPU or link written inline in a node design, is either

- a full entry (every field of ``data/gpus.yaml`` / ``data/links.yaml``;
  ``source`` optional), or
- ``base: NAME`` plus the fields to change, e.g. ``{base: a100-40gb-pcie,
  memory_gb: 80}``: everything else is NAME's, as the catalog beneath has it.

Folders are layered in the order given, each over the built-in catalog and the
folders before it: an entry with a built-in name replaces it (``nvlink4:
{base: nvlink4, efficiency: 0.86}`` recalibrates NVLink 4 everywhere).

A `Catalog` is a plain frozen value passed to whatever reads the catalog; no
process-wide state. ``memory_gb`` is read like the catalog reads a card's
marketed size: ``memory_gb: 80`` means 80 GiB, as the "80 GB" A100 holds.

>>> catalog = load_catalog([])
>>> catalog.resolve_gpu({"base": "a100-40gb-pcie", "memory_gb": 80}).memory_bytes / 2**30
80.0
>>> catalog.resolve_gpu("a100-40gb-pcie").memory_bytes / 2**30
40.0
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scalesim.errors import InputError, unknown_name
from scalesim.hardware.catalog import _DOC_FIELDS, _GPU_FIELDS as GPU_YAML_FIELDS, _LINK_FIELDS as LINK_YAML_FIELDS
from scalesim.hardware.catalog import _lookup, catalog_notes, gpus, links, load_gpu_mapping, load_link_mapping
from scalesim.hardware.specs import GpuSpec, LinkSpec
from scalesim.schema import read_yaml

ENV_VAR = "SCALESIM_CATALOG"
BUILTIN = "built-in catalog"
GPUS_FILE, LINKS_FILE = "gpus.yaml", "links.yaml"

# YAML field <- spec attribute, with the factor that turns the SI value back into the YAML unit
# (bare numbers parse as SI: FLOP/s, bytes, bytes/s, seconds, watts).
_GPU_FIELDS = {"full_name": "full_name", "arch": "arch", "fp32": "fp32_flop_per_s", "tf32": "tf32_flop_per_s",
               "fp16": "fp16_flop_per_s", "bf16": "bf16_flop_per_s", "fp8": "fp8_flop_per_s",
               "int8": "int8_op_per_s", "memory": "memory_bytes", "memory_bw": "memory_bw_bytes_per_s",
               "nvlink": "nvlink", "nvlink_max_gpus": "nvlink_max_gpus", "pcie": "pcie", "pcie_p2p": "pcie_p2p",
               "tdp": "tdp_w", "idle": "idle_w", "ecc": "ecc", "mig": "mig", "list_price_usd": "list_price_usd",
               "cloud_usd_per_gpu_hour": "cloud_usd_per_gpu_hour", "gemm_efficiency": "gemm_efficiency",
               "memory_bw_efficiency": "memory_bw_efficiency", "sms": "sms",
               "training_clock_fraction": "training_clock_fraction", "gemm_k_overhead": "gemm_k_overhead"}
_LINK_FIELDS = {"kind": "kind", "bandwidth": "bw_bytes_per_s", "latency": "latency_s",
                "efficiency": "efficiency", "description": "description",
                "in_network_reduction": "in_network_reduction", "net_plugin_latency": "net_plugin_latency_s",
                "nvls_pipeline_fill": "nvls_pipeline_fill"}
_EXTRA_KEYS = ("base", "name", "memory_gb")
BASE_HINT = " or a mapping with base: NAME"


@dataclass(frozen=True, slots=True)
class Catalog:
    """GPUs and links by name, with the file each user entry came from. Hashable (content)."""

    gpu_specs: tuple[GpuSpec, ...]
    link_specs: tuple[LinkSpec, ...]
    origins: tuple[tuple[str, str], ...] = ()          # (name, file) of entries from user folders
    user_notes: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()  # (name, notes, estimated)

    def gpus(self) -> dict[str, GpuSpec]:
        return {g.name: g for g in self.gpu_specs}

    def links(self) -> dict[str, LinkSpec]:
        return {link.name: link for link in self.link_specs}

    def gpu(self, name: Any, *, key: str | None = None) -> GpuSpec:
        return _lookup("GPU", name, self.gpus(), key, BASE_HINT)

    def link(self, name: Any, *, key: str | None = None) -> LinkSpec:
        return _lookup("link", name, self.links(), key, BASE_HINT)

    def origin(self, name: str) -> str:
        """The file an entry came from, or 'built-in catalog'."""
        return dict(self.origins).get(name, BUILTIN)

    def notes(self, name: str) -> dict[str, list[str]]:
        for entry, notes, estimated in self.user_notes:
            if entry == name:
                return {"notes": list(notes), "estimated": list(estimated)}
        return catalog_notes(name)

    def with_spec(self, spec: GpuSpec | LinkSpec, origin: str) -> "Catalog":
        """This catalog with one entry added or replaced (e.g. a calibrated link), marked as from `origin`."""
        is_gpu = isinstance(spec, GpuSpec)
        table = self.gpus() if is_gpu else self.links()
        table[spec.name] = spec
        origins = {**dict(self.origins), spec.name: origin}
        return Catalog(tuple(table.values()) if is_gpu else self.gpu_specs,
                       self.link_specs if is_gpu else tuple(table.values()), tuple(origins.items()), self.user_notes)

    def resolve_gpu(self, value: Any, *, key: str | None = None, file: str | None = None) -> GpuSpec:
        """A GPU from a name, a `base:` mapping with overrides, or a full inline entry."""
        if isinstance(value, Mapping):
            return _gpu_entry(value, self, name=None, key=key or "gpu", file=file)
        try:
            return self.gpu(value, key=key)
        except InputError as exc:
            raise exc.located(file=file) from None

    def resolve_link(self, value: Any, *, key: str | None = None, file: str | None = None) -> LinkSpec:
        """A link from a name, a `base:` mapping with overrides, or a full inline entry."""
        if isinstance(value, Mapping):
            return _link_entry(value, self, name=None, key=key or "link", file=file)
        try:
            return self.link(value, key=key)
        except InputError as exc:
            raise exc.located(file=file) from None


def builtin_catalog() -> Catalog:
    """The catalog shipped in the package, as a `Catalog` value."""
    return Catalog(tuple(gpus().values()), tuple(links().values()))


def catalog_dirs(option_dirs: Iterable[str | Path] = (), env: Mapping[str, str] | None = None) -> list[Path]:
    """The folders to layer: those of $SCALESIM_CATALOG (os.pathsep-separated) first, then the options'."""
    env = os.environ if env is None else env
    from_env = [p for p in env.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    return [Path(p) for p in [*from_env, *option_dirs]]


def load_catalog(dirs: Iterable[str | Path]) -> Catalog:
    """The built-in catalog with each folder's entries layered over it, in order."""
    catalog = builtin_catalog()
    for directory in dirs:
        catalog = _with_folder(catalog, Path(directory))
    return catalog


# ---------------------------------------------------------------- folders

def _with_folder(catalog: Catalog, directory: Path) -> Catalog:
    if not directory.is_dir():
        raise InputError(("is a file, not a folder" if directory.exists() else "catalog folder not found")
                         + f" (expected a folder holding {GPUS_FILE} and/or {LINKS_FILE}; give the folder)",
                         file=str(directory))
    for name in (LINKS_FILE, GPUS_FILE):     # a folder named gpus.yaml was 'found neither'
        if (directory / name).exists() and not (directory / name).is_file():
            raise InputError(f"is a folder, not a file; give the catalog's {name} as a YAML file",
                             file=str(directory / name))
    found = [directory / f for f in (LINKS_FILE, GPUS_FILE) if (directory / f).is_file()]
    if not found:
        raise InputError(f"a catalog folder needs {GPUS_FILE} and/or {LINKS_FILE}; found neither",
                         file=str(directory))
    for path in found:          # links first: the folder's GPUs may name its links
        catalog = _with_file(catalog, path, path.name == GPUS_FILE)
    return catalog


def _with_file(catalog: Catalog, path: Path, is_gpus: bool) -> Catalog:
    data = read_yaml(path, what="catalog file")
    if not isinstance(data, dict) or not data:
        raise InputError("expected a mapping of names to entries", file=str(path))
    new_gpus, new_links = catalog.gpus(), catalog.links()
    origins, notes = dict(catalog.origins), {n: (a, b) for n, a, b in catalog.user_notes}
    for name, entry in data.items():
        if isinstance(name, bool) or not isinstance(name, (str, int)):     # `~:` was a GPU named 'None'
            raise InputError(f"an entry's name must be text, got {name!r} (YAML reads ~, null, yes, no, on and off as "
                             "null or booleans: quote the name)", file=str(path), key=str(name))
        if is_gpus:
            new_gpus[str(name)] = _gpu_entry(entry, catalog, name=name, key=str(name), file=str(path))
        else:
            new_links[str(name)] = _link_entry(entry, catalog, name=name, key=str(name), file=str(path))
            before = catalog.links().get(str(name))
            if before is not None and new_links[str(name)].kind != before.kind:     # GPUs name it as that kind
                raise InputError(f"is of kind {new_links[str(name)].kind}, but {name} is a {before.kind} link GPUs and "
                                 "designs name as such: an entry with a catalog name keeps its kind (give the new "
                                 "link a name of its own)",
                                 file=str(path), key=f"{name}.kind" if "kind" in entry else f"{name}.base")
        origins[str(name)] = str(path)
        if isinstance(entry, Mapping):
            notes[str(name)] = (tuple(map(str, entry.get("notes", []))), tuple(map(str, entry.get("estimated", []))))
    return Catalog(tuple(new_gpus.values()), tuple(new_links.values()), tuple(origins.items()),
                   tuple((n, a, b) for n, (a, b) in notes.items()))


# ---------------------------------------------------------------- entries

def _gpu_entry(value: Any, catalog: Catalog, *, name: Any, key: str, file: str | None) -> GpuSpec:
    mapping, name = _merged(value, name, key, file, lambda base: _spec_fields(catalog.gpu(base, key=f"{key}.base"),
                                                                           _GPU_FIELDS), GPU_YAML_FIELDS)
    return load_gpu_mapping(mapping, name=name, key=key, file=file, link_table=catalog.links())


def _link_entry(value: Any, catalog: Catalog, *, name: Any, key: str, file: str | None) -> LinkSpec:
    mapping, name = _merged(value, name, key, file, lambda base: _spec_fields(catalog.link(base, key=f"{key}.base"),
                                                                           _LINK_FIELDS), LINK_YAML_FIELDS)
    return load_link_mapping(mapping, name=name, key=key, file=file)


def _merged(value: Any, name: Any, key: str, file: str | None, base_fields, allowed: tuple[str, ...]
            ) -> tuple[dict, str]:
    """(the entry's fields with its base's filled in, its name)."""
    if not isinstance(value, Mapping):
        raise InputError(f"expected a catalog name or a mapping of fields, got {value!r}", file=file, key=key)
    allowed = (*_EXTRA_KEYS, *allowed, *_DOC_FIELDS)
    for field in value:
        if field not in allowed:
            raise unknown_name("field", field, allowed, key=f"{key}.{field}", file=file)
    entry = {k: v for k, v in value.items() if k not in _EXTRA_KEYS}
    base = value.get("base")
    for field in ("base", "name"):      # a list or null here was read as a full entry, or as the name '[1]'
        if field in value and not (isinstance(value[field], str) and value[field].strip()):
            raise InputError(f"{field} must be {'a catalog name' if field == 'base' else 'text'} (a non-empty string), "
                             f"got {value[field]!r}", file=file, key=f"{key}.{field}")
    if "memory_gb" in value:
        gb = value["memory_gb"]
        if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb < float("inf"):
            raise InputError(f"memory_gb must be a positive number (GiB, as the catalog reads '80 GB'), got {gb!r}",
                             file=file, key=f"{key}.memory_gb")
        entry["memory"] = f"{gb} GiB"
    if base is not None:
        try:
            entry = {**base_fields(base), "source": _changed_source(base, entry), **entry}
        except InputError as exc:
            raise exc.located(file=file) from None
    # In a folder the entry's key is its name; inline, `name:` (else '<base>-custom').
    label = name if name is not None else value.get("name", f"{base}-custom" if base else "inline")
    return entry, str(label)


def _changed_source(base: str, entry: Mapping) -> list[str]:
    changed = sorted(k for k in entry if k not in ("notes", "estimated", "source"))
    return [f"catalog entry '{base}' with {', '.join(changed) or 'nothing'} changed by the user"]


def _spec_fields(spec: Any, table: Mapping[str, str]) -> dict:
    """A spec back as catalog fields (SI numbers), so overrides can be merged and re-validated."""
    out = {yaml_name: getattr(spec, attr) for yaml_name, attr in table.items()}
    if isinstance(spec, GpuSpec):
        if spec.sm_clock_hz > 0:
            out["boost_clock_mhz"] = spec.sm_clock_hz / 1e6
        if spec.fp8_gemm_efficiency is not None:
            out["fp8_gemm_efficiency"] = spec.fp8_gemm_efficiency
        if spec.fp32_gemm_efficiency is not None:
            out["fp32_gemm_efficiency"] = spec.fp32_gemm_efficiency
        if spec.read_bw_efficiency is not None:
            out["read_bw_efficiency"] = spec.read_bw_efficiency
    return {k: v for k, v in out.items() if not (k == "sms" and v == 0)}


def dump_entries(entries: Mapping[str, Mapping]) -> str:
    """YAML text of catalog entries, as a folder's gpus.yaml / links.yaml holds them."""
    return yaml.safe_dump(dict(entries), sort_keys=False, allow_unicode=True, width=100)


def catalog_for(option_dirs: Iterable[str | Path] = (), env: Mapping[str, str] | None = None) -> Catalog | None:
    """The catalog a command uses: None (the built-in one) unless $SCALESIM_CATALOG or --catalog name folders."""
    dirs = catalog_dirs(option_dirs, env)
    return load_catalog(dirs) if dirs else None
