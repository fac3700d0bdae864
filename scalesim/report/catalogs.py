"""Tables and JSON for `scalesim hardware | topologies | topology show | models`."""

from __future__ import annotations

import networkx as nx
from rich.table import Table

from scalesim.hardware import gpus, links
from scalesim.models import model_info
from scalesim.topology.design import NodeDesign, builtin_topology_names, load_node_design
from scalesim.units import format_bytes


def _t(x: float | None, scale: float = 1e12, digits: int = 1) -> str:
    return "-" if x is None else f"{x / scale:,.{digits}f}"


def hardware_tables() -> list[Table]:
    g = Table(title="GPUs (dense peak TFLOP/s; fp16/bf16 with FP32 accumulate)", title_justify="left")
    for col in ("name", "fp32", "tf32", "bf16", "fp8", "memory", "mem GB/s", "NVLink", "PCIe", "P2P",
                "TDP W", "ECC", "$/GPU-h", "GEMM eff", "source"):
        g.add_column(col, overflow="fold")
    for spec in gpus().values():
        g.add_row(spec.name, _t(spec.fp32_flop_per_s), _t(spec.tf32_flop_per_s), _t(spec.bf16_flop_per_s),
                  _t(spec.fp8_flop_per_s), format_bytes(spec.memory_bytes),
                  _t(spec.memory_bw_bytes_per_s, 1e9, 0), spec.nvlink or "-", spec.pcie,
                  "yes" if spec.pcie_p2p else "no", f"{spec.tdp_w:.0f}",
                  {True: "yes", False: "no", None: "?"}[spec.ecc],
                  "-" if spec.cloud_usd_per_gpu_hour is None else f"{spec.cloud_usd_per_gpu_hour:.2f}",
                  f"{spec.gemm_efficiency:.2f}", spec.source[0][:60])
    lt = Table(title="Links (bandwidth per direction)", title_justify="left")
    for col in ("name", "kind", "GB/s", "latency us", "efficiency", "description"):
        lt.add_column(col, overflow="fold")
    for spec in links().values():
        lt.add_row(spec.name, spec.kind, f"{spec.bw_bytes_per_s / 1e9:,.2f}", f"{spec.latency_s * 1e6:.2f}",
                   f"{spec.efficiency:.2f}", spec.description[:70])
    return [g, lt]


def hardware_json() -> dict:
    def row(spec) -> dict:
        out = {f: getattr(spec, f) for f in spec.__slots__}
        out["source"] = list(spec.source)
        return out

    return {"gpus": [row(s) for s in gpus().values()], "links": [row(s) for s in links().values()]}


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
                  str(r["sockets"]), str(r["nics"]), r["description"][:90])
    return t


def topology_description(design: NodeDesign, graph: nx.Graph) -> Table:
    t = Table(title=f"{design.name}: {' '.join(design.description.split())}", title_justify="left")
    for col in ("from", "to", "link", "GB/s per direction", "duplex"):
        t.add_column(col)
    for u, v, d in graph.edges(data=True):
        t.add_row(u, v, d["link"].name, f"{d['link'].bw_bytes_per_s / 1e9:,.1f}",
                  "full" if d["duplex"] else "shared")
    return t


def models_table() -> Table:
    t = Table(title="Model zoo", title_justify="left")
    for col in ("name", "family", "parameters", "default seq_len", "source"):
        t.add_column(col, overflow="fold")
    for m in model_info():
        t.add_row(m["name"], m["family"], f"{m['params'] / 1e6:,.1f} M", str(m.get("seq_len") or "-"),
                  str(m["source"])[:70])
    return t
