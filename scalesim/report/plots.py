"""Plots for memos: step timeline per GPU (timeline_plot.py), scaling efficiency, topology drawing.

matplotlib with the Agg backend (no display needed); PNG and SVG by the
file's extension.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scalesim.report.figures import efficiency_ylim, fit_title, hollow_unfit, new_figure, save_figure
from scalesim.report.timeline_plot import _merge_spans, timeline_columns_plot, timeline_plot  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    import networkx as nx


def scaling_plot(points: list[dict], path: Path, title: str, against: str | None = None) -> Path:
    """Scaling efficiency (per-GPU throughput vs one GPU) against GPU count; hollow, the points whose
    plan would not fit (`fits` false). `against`: why the 1-GPU run the curve is measured against
    could not run (formatting.py unrunnable_reference), written by its point."""
    fig, ax = new_figure((6.5, 4.2))
    xs = [p["gpus"] for p in points]
    ys = [100 * p["scaling_efficiency"] for p in points]
    ax.plot(xs, ys, marker="o")
    if hollow_unfit(ax, points, "C0", label="would not fit in memory"):
        ax.legend(loc="upper right", fontsize=8)
    if against and 1 in xs:
        ax.annotate(against, (1, 100), xytext=(10, -16), textcoords="offset points", fontsize=8, color="grey")
    ax.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("scaling efficiency (%)")
    efficiency_ylim(ax, ys)
    ax.set_xticks(xs)
    fit_title(ax, title)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def topology_plot(graph: nx.Graph, path: Path, title: str) -> Path:
    """Draw a node design: GPUs, switches, CPUs, memory, NICs; edges labelled with their link.

    Each part sits one row below what it hangs from (`_ordered_layout`), so a straight edge joins
    neighbouring rows and passes through no other part (`edge_routes`); a mesh of GPU links inside
    one row is drawn as arcs below the row, an NVSwitch as a bus under the GPUs it joins."""
    import networkx as nx

    pos, rows = _ordered_layout(graph)
    routes = edge_routes(graph, rows)
    colours = {"gpu": "#76B900", "pcie_switch": "#4C72B0", "cpu": "#C44E52", "host_memory": "#937860",
               "nvswitch": "#8172B2", "nic": "#DD8452"}
    widest = max(len(r) for r in rows.values())
    width = max(11.0, 0.8 * widest)        # inches
    fig, ax = new_figure((width, 1.2 * (len(rows) + 1)))
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=900,
                           node_color=[colours.get(d["kind"], "grey") for _, d in graph.nodes(data=True)])
    nx.draw_networkx_labels(graph, pos, ax=ax, font_size=7)
    straight = [e for e, how in routes.items() if how == "straight"]
    nx.draw_networkx_edges(graph, pos, edgelist=straight, ax=ax, alpha=0.5)

    def label(u, v) -> str:
        link = graph.edges[u, v]["link"]
        return f"{link.name}\n{link.bw_bytes_per_s / 1e9:,.1f}".removesuffix(".0") + " GB/s"   # 31.5, as the table

    # A label turned along a short vertical edge (memory to CPU) is longer than the gap between
    # the two circles and hides under them: those read across, above the circles.
    upright = {e: label(*e) for e in straight if abs(pos[e[0]][0] - pos[e[1]][0]) < 1e-9}
    # so is one along a short edge between neighbours in a row (a bridged GPU pair): it reads below
    level = [e for e in straight if pos[e[0]][1] == pos[e[1]][1] and abs(pos[e[0]][0] - pos[e[1]][0]) * width < 1.6]
    for u, v in level:
        ax.text((pos[u][0] + pos[v][0]) / 2, pos[u][1] - 0.22, label(u, v), fontsize=6, ha="center", va="top")
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, font_size=6,
                                 edge_labels={e: label(*e) for e in straight if e not in upright and e not in level})
    for text in nx.draw_networkx_edge_labels(graph, pos, edge_labels=upright, ax=ax, font_size=6,
                                             rotate=False).values():
        text.set_zorder(3)
    _draw_arcs(ax, graph, pos, [e for e, how in routes.items() if how == "arc"], label)
    _draw_buses(ax, graph, pos, [e for e, how in routes.items() if how == "bus"], label)
    if "arc" in routes.values():
        ax.set_ylim(-max(rows) - 1.2, 0.5)     # room for the arcs below the lowest row
    ax.set_xlim(0, 1)           # every row spans it (matplotlib's 5% margins: inches of white on a wide rack)
    fit_title(ax, f"{title} (links: bandwidth per direction)")
    ax.axis("off")
    return save_figure(fig, path)


def _draw_arcs(ax, graph, pos, arcs: list, label) -> None:
    """Arcs below their row, one label per link on its widest arc (28 labels of a mesh would hide
    one another)."""
    import networkx as nx

    if not arcs:
        return
    arc = "arc3,rad=0.25"
    # drawn from left to right, an arc bends below the row (matplotlib turns `rad` > 0 clockwise)
    arcs = sorted({(u, v) if pos[u][0] < pos[v][0] else (v, u) for u, v in arcs},
                  key=lambda e: pos[e[1]][0] - pos[e[0]][0])
    nx.draw_networkx_edges(graph, pos, edgelist=arcs, ax=ax, alpha=0.5, arrows=True,
                           arrowstyle="-", connectionstyle=arc, node_size=900)
    widest = {graph.edges[e]["link"].name: e for e in arcs}
    nx.draw_networkx_edge_labels(graph, pos, ax=ax, font_size=6, connectionstyle=arc, node_size=900,
                                 edge_labels={e: label(*e) + " (every arc)" for e in widest.values()})


def _draw_buses(ax, graph, pos, spokes: list, label) -> None:
    """An NVSwitch as a bus: a line under the GPUs it joins, a drop from each GPU, one label (72
    spokes into one point would run flat through the row)."""
    hubs: dict = {}
    for u, v in spokes:
        hub, gpu = (u, v) if graph.nodes[u]["kind"] == "nvswitch" else (v, u)
        hubs.setdefault(hub, []).append(gpu)
    for hub, gpus in hubs.items():
        xs = [pos[g][0] for g in gpus] + [pos[hub][0]]
        y = pos[hub][1] + 0.5
        ax.plot([min(xs), max(xs)], [y, y], color="black", alpha=0.5, linewidth=1.5, zorder=1)
        for g in gpus:
            ax.plot([pos[g][0]] * 2, [pos[g][1], y], color="black", alpha=0.5, linewidth=1, zorder=1)
        ax.plot([pos[hub][0]] * 2, [y, pos[hub][1]], color="black", alpha=0.5, linewidth=1.5, zorder=1)
        ax.text(pos[hub][0], y, label(gpus[0], hub) + " (each GPU)", fontsize=6, ha="center", va="center",
                zorder=3, bbox={"boxstyle": "round", "fc": "white", "ec": "white"})


def _natural(name) -> tuple:
    """'gpu10' after 'gpu9': names compared by their text and number parts."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


_KIND_ORDER = {"pcie_switch": 0, "gpu": 1, "nic": 2}


def _parent(graph: nx.Graph, node) -> object | None:
    """What a PCIe part hangs from: its PCIe switch, else its CPU socket (a memory: its CPU)."""
    kind = graph.nodes[node]["kind"]
    if kind not in ("pcie_switch", "gpu", "nic", "host_memory"):
        return None
    near = {graph.nodes[n]["kind"]: n for n in sorted(graph[node], key=_natural, reverse=True)}
    return near.get("pcie_switch") if kind != "pcie_switch" and "pcie_switch" in near else near.get("cpu")


def _ordered_layout(graph: nx.Graph) -> tuple[dict, dict[int, list]]:
    """Positions and rows: memory above its CPU, the CPUs, then each switch, GPU and NIC one row below
    what it hangs from (a NIC on the host beside the switches, not under them), NVSwitches last.
    Each row is ordered by where its parts' parents sit, then switches, GPUs, NICs, in natural name
    order, so GPU 0..N read left to right."""
    parent = {n: _parent(graph, n) for n in graph}
    row: dict = {}

    def row_of(node, seen=()) -> int:
        if node not in row:
            kind, up = graph.nodes[node]["kind"], parent[node]
            if kind == "cpu":
                row[node] = 1
            elif up is not None and kind != "host_memory" and node not in seen:
                row[node] = row_of(up, seen + (node,)) + 1
            else:
                row[node] = {"host_memory": 0, "nvswitch": 99}.get(kind, 3)
        return row[node]

    for node in graph:
        row_of(node)
    deepest = max((r for r in row.values() if r != 99), default=1)
    row = {n: deepest + 1 if r == 99 else r for n, r in row.items()}
    rows: dict[int, list] = {}
    for node in graph:
        rows.setdefault(row[node], []).append(node)
    pos: dict = {}
    for r in sorted(rows, key=lambda r: (r == 0, r)):     # memory after the CPUs it sits above
        def key(n):
            up = parent[n]
            return (pos[up][0] if up in pos else -1.0, _KIND_ORDER.get(graph.nodes[n]["kind"], 3), _natural(n))
        rows[r].sort(key=key)
        for i, node in enumerate(rows[r]):
            pos[node] = ((i + 0.5) / len(rows[r]), -r)
    return pos, dict(sorted(rows.items()))


def edge_routes(graph: nx.Graph, rows: dict[int, list]) -> dict[tuple, str]:
    """How each edge is drawn: 'straight' (it joins neighbouring rows, or neighbours in a row),
    'bus' (to an NVSwitch), or 'arc' (inside one row between parts with others between them, which
    a straight line would run through, and the other edges of their links in that row, so that all
    of a mesh's edges read alike under its one label)."""
    place = {n: (r, i) for r, nodes in rows.items() for i, n in enumerate(nodes)}
    routes = {}
    for u, v in graph.edges:
        kinds = {graph.nodes[u]["kind"], graph.nodes[v]["kind"]}
        routes[u, v] = "bus" if kinds == {"gpu", "nvswitch"} else "straight"
    level = [(u, v) for (u, v), how in routes.items() if how == "straight" and place[u][0] == place[v][0]]
    bent = {graph.edges[u, v]["link"].name for u, v in level if abs(place[u][1] - place[v][1]) > 1}
    routes.update({(u, v): "arc" for u, v in level if graph.edges[u, v]["link"].name in bent})
    return routes
