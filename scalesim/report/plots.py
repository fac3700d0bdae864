"""Plots for memos: step timeline per GPU (timeline_plot.py), scaling efficiency, topology drawing.

matplotlib with the Agg backend (no display needed); PNG and SVG by the
file's extension.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from scalesim.report.figures import new_figure, save_figure
from scalesim.report.timeline_plot import _merge_spans, timeline_columns_plot, timeline_plot  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    import networkx as nx


def scaling_plot(points: list[dict], path: Path, title: str) -> Path:
    """Scaling efficiency (per-GPU throughput vs one GPU) against GPU count."""
    fig, ax = new_figure((6.5, 4.2))
    xs = [p["gpus"] for p in points]
    ys = [100 * p["scaling_efficiency"] for p in points]
    ax.plot(xs, ys, marker="o")
    ax.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("scaling efficiency (%)")
    # 0-100% always; above it when a plan scales super-linearly (ZeRO shards the optimizer step
    # that the one-GPU baseline runs whole), so no point is cut off the top.
    ax.set_ylim(0, max(105, math.ceil(max(ys, default=100) / 10) * 10 + 5))
    ax.set_xticks(xs)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def topology_plot(graph: nx.Graph, path: Path, title: str) -> Path:
    """Draw a node design: GPUs, switches, CPUs, memory, NICs; edges labelled with their link."""
    layers = {"host_memory": 0, "cpu": 1, "pcie_switch": 2, "nic": 3, "gpu": 4, "nvswitch": 5}
    for node, data in graph.nodes(data=True):
        data["layer"] = layers.get(data["kind"], 3)
    import networkx as nx

    pos = _ordered_layout(graph)
    colours = {"gpu": "#76B900", "pcie_switch": "#4C72B0", "cpu": "#C44E52", "host_memory": "#937860",
               "nvswitch": "#8172B2", "nic": "#DD8452"}
    fig, ax = new_figure((11, 6))
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=900,
                           node_color=[colours.get(d["kind"], "grey") for _, d in graph.nodes(data=True)])
    nx.draw_networkx_labels(graph, pos, ax=ax, font_size=7)
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.5)
    labels = {(u, v): f"{d['link'].name}\n{d['link'].bw_bytes_per_s / 1e9:,.0f} GB/s" for u, v, d in graph.edges(data=True)}
    # A label turned along a short vertical edge (memory to CPU) is longer than the gap between
    # the two circles and hides under them: those read across, above the circles.
    upright = {e: t for e, t in labels.items() if abs(pos[e[0]][0] - pos[e[1]][0]) < 1e-9}
    nx.draw_networkx_edge_labels(graph, pos, edge_labels={e: t for e, t in labels.items() if e not in upright},
                                 ax=ax, font_size=6)
    for text in nx.draw_networkx_edge_labels(graph, pos, edge_labels=upright, ax=ax, font_size=6,
                                             rotate=False).values():
        text.set_zorder(3)
    ax.set_title(title)
    ax.axis("off")
    return save_figure(fig, path)


def _natural(name) -> tuple:
    """'gpu10' after 'gpu9': names compared by their text and number parts."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


def _ordered_layout(graph: nx.Graph) -> dict:
    """One row per kind of part (memory, CPUs, switches, NICs, GPUs, NVSwitches), each row in
    natural name order, so GPU 0..N read left to right."""
    rows: dict[int, list] = {}
    for node, data in graph.nodes(data=True):
        rows.setdefault(data["layer"], []).append(node)
    pos = {}
    for layer, nodes in rows.items():
        nodes.sort(key=_natural)
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), -layer)
    return pos
