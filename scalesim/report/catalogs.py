"""Tables and JSON for `scalesim hardware | topologies | topology show | models`."""

from __future__ import annotations

import networkx as nx
from rich.markup import escape
from rich.table import Table

from scalesim.errors import unknown_name
from scalesim.hardware.user_catalog import BUILTIN, Catalog, builtin_catalog
from scalesim.models import model_info
from scalesim.report.formatting import unit_price
from scalesim.topology.design import NodeDesign, builtin_topology_names, load_node_design
from scalesim.units import format_bytes, format_time, format_usd


def _t(x: float | None, scale: float = 1e12, digits: int = 1) -> str:
    return "-" if x is None else f"{x / scale:,.{digits}f}"


def hardware_tables(catalog: Catalog | None = None) -> list[Table]:
    """The catalog's GPUs and links; entries from a user's catalog folder name their file."""
    catalog = catalog or builtin_catalog()
    user = bool(catalog.origins)
    g = Table(title="GPUs: dense peak TFLOP/s (fp16/bf16 with FP32 accumulate); "
              "`scalesim hardware NAME` shows sources", title_justify="left")
    for col in ("name", "bf16", "fp8", "memory", "mem GB/s", "NVLink", "P2P", "TDP W", "$/GPU-h"):
        g.add_column(col, no_wrap=True)
    if user:
        g.add_column("from", overflow="fold")
    for spec in catalog.gpu_specs:
        g.add_row(spec.name, _t(spec.bf16_flop_per_s, digits=0), _t(spec.fp8_flop_per_s, digits=0),
                  format_bytes(spec.memory_bytes), _t(spec.memory_bw_bytes_per_s, 1e9, 0),
                  (spec.nvlink or "-").replace("-bridge", " bridge").replace(" bridge-ga102", " bridge"),
                  "yes" if spec.pcie_p2p else "no", f"{spec.tdp_w:.0f}",
                  "-" if spec.cloud_usd_per_gpu_hour is None else unit_price(spec.cloud_usd_per_gpu_hour)[1:],
                  *([_from(catalog, spec.name)] if user else []))
    lt = Table(title="Links: bandwidth per direction, achieved efficiency", title_justify="left")
    for col in ("name", "kind", "GB/s", "latency us", "eff."):
        lt.add_column(col, no_wrap=True)
    lt.add_column("description", overflow="fold")
    if user:
        lt.add_column("from", overflow="fold")
    for spec in catalog.link_specs:
        lt.add_row(spec.name, spec.kind, f"{spec.bw_bytes_per_s / 1e9:,.2f}", f"{spec.latency_s * 1e6:.2f}",
                   f"{spec.efficiency:.2f}", spec.description, *([_from(catalog, spec.name)] if user else []))
    return [g, lt]


def _from(catalog: Catalog, name: str) -> str:
    origin = catalog.origin(name)
    return "built-in" if origin == BUILTIN else origin


def _shown_fields(spec) -> list[str]:
    """A spec's catalog fields."""
    return list(spec.__slots__)


def readable_value(field: str, value) -> str:
    """A catalog field in the unit its name ends in, as a buyer reads it (`--json` keeps SI numbers).

    >>> readable_value("bf16_flop_per_s", 9.894e14), readable_value("memory_bytes", 85899345920.0)
    ('989.4 TFLOP/s', '80.0 GiB')
    >>> readable_value("bw_bytes_per_s", 4.5e11), readable_value("latency_s", 2e-7), readable_value("sms", 132)
    ('450.0 GB/s per direction', '0.2 us', '132')
    """
    if not isinstance(value, float) or value == 0:
        return "-" if value is None else str(value)
    if field == "bw_bytes_per_s":           # a link's: the catalog stores one direction (STYLE.md)
        return f"{value / 1e9:,.1f} GB/s per direction"
    for suffix, show in (("_flop_per_s", lambda v: f"{v / 1e12:,.1f} TFLOP/s"),
                         ("_op_per_s", lambda v: f"{v / 1e12:,.1f} TOP/s"),
                         ("_bytes_per_s", lambda v: f"{v / 1e9:,.1f} GB/s"), ("_bytes", format_bytes),
                         ("_hz", lambda v: f"{v / 1e6:,.0f} MHz"), ("_w", lambda v: f"{v:,.0f} W"),
                         ("_usd_per_gpu_hour", lambda v: f"{unit_price(v)} per GPU-hour"), ("_usd", format_usd),
                         ("_s", format_time)):
        if field.endswith(suffix):
            return show(value)
    return f"{value:g}"


def hardware_detail(name: str, catalog: Catalog | None = None) -> Table:
    """Every field of one GPU or link, with its sources and the file it came from."""
    catalog = catalog or builtin_catalog()
    table = {**catalog.gpus(), **catalog.links()}
    if name not in table:
        raise unknown_name("GPU or link", name, table)
    spec = table[name]
    t = Table(title=name, show_header=False, title_justify="left")
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    for field in _shown_fields(spec):
        value = getattr(spec, field)
        if field == "source":
            for i, src in enumerate(value):
                t.add_row("source" if i == 0 else "", src)
            continue
        t.add_row(field, readable_value(field, value))
    t.add_row("from", catalog.origin(name))
    said = catalog.notes(name)
    if said["estimated"]:
        t.add_row("estimated", ", ".join(said["estimated"]) + " (engineering estimates; see the notes)")
    for i, note in enumerate(said["notes"]):
        t.add_row("notes" if i == 0 else "", note)
    return t


def hardware_json(catalog: Catalog | None = None, name: str | None = None) -> dict:
    """Every entry (or only `name`'s) with all its fields, its notes and `file` (the user folder's
    file, or 'built-in catalog')."""
    catalog = catalog or builtin_catalog()
    if name is not None and name not in {**catalog.gpus(), **catalog.links()}:
        raise unknown_name("GPU or link", name, {**catalog.gpus(), **catalog.links()})

    def row(spec) -> dict:
        out = {f: getattr(spec, f) for f in _shown_fields(spec)}
        out["source"] = list(spec.source)
        out.update(catalog.notes(spec.name))
        out["file"] = catalog.origin(spec.name)
        return out

    return {"gpus": [row(s) for s in catalog.gpu_specs if name in (None, s.name)],
            "links": [row(s) for s in catalog.link_specs if name in (None, s.name)]}


def topologies_json() -> list[dict]:
    rows = []
    for name in builtin_topology_names():
        d = load_node_design(name)
        rows.append({"name": d.name, "gpu": d.gpu, "gpus": d.gpus, "p2p": d.p2p,
                     "nvlink": d.nvlink.fabric if d.nvlink else None,
                     "pcie_switches": d.pcie.switches, "sockets": d.host.sockets,
                     "nics": d.nics.count, "description": " ".join(d.description.split())})
    return rows


def topologies_table() -> Table:
    t = Table(title="Node designs (topologies/)", title_justify="left")
    for col in ("name", "GPUs", "NVLink", "PCIe switches", "sockets", "NICs", "description"):
        t.add_column(col, overflow="fold")
    for r in topologies_json():
        t.add_row(r["name"], f"{r['gpus']} x {r['gpu']}", r["nvlink"] or "-", str(r["pcie_switches"]),
                  str(r["sockets"]), str(r["nics"]), r["description"])
    return t


def topology_description(design: NodeDesign, graph: nx.Graph) -> Table:
    t = Table(title=escape(f"{design.name}: {' '.join(design.description.split())}"), title_justify="left")
    for col in ("from", "to", "link", "GB/s per direction", "duplex"):
        t.add_column(col)
    for u, v, d in graph.edges(data=True):
        t.add_row(u, v, d["link"].name, f"{d['link'].bw_bytes_per_s / 1e9:,.1f}",
                  "full" if d["duplex"] else "shared")
    return t


def models_table() -> Table:
    t = Table(title="Model zoo", title_justify="left")
    for col in ("name", "family", "parameters", "active per token", "default seq_len", "source"):
        t.add_column(col, overflow="fold")
    for m in model_info():
        active = m.get("active_params", m["params"])
        t.add_row(m["name"], m["family"], _count(m["params"]), "all" if active == m["params"] else _count(active),
                  str(m.get("seq_len") or "-"), str(m["source"]))
    return t


def _count(params: float) -> str:
    """A parameter count as a buyer says it: 354.8 M, 6.74 B, 671 B (not 671,026.4 M)."""
    return f"{params / 1e6:,.1f} M" if params < 1e9 else f"{params / 1e9:.3g} B"
