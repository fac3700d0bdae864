"""Plots for memos: step timeline per GPU, scaling efficiency, topology drawing.

matplotlib with the Agg backend (no display needed); PNG and SVG by the
file's extension.
"""

from __future__ import annotations

import math

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

from scalesim.report.figures import save_figure  # noqa: E402
from scalesim.timeline import Timeline  # noqa: E402

COLOURS = {"forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B2",
           "optimizer": "#C44E52", "other": "#937860", "comm": "#DD8452",
           "waiting for host": "#C8C8C8"}   # GPU work ready but not yet issued by the CPU
GPU_WORK = ("forward", "backward", "recompute", "optimizer", "other")


def _scale(seconds: float) -> tuple[float, str]:
    if seconds < 1e-3:
        return 1e6, "µs"
    if seconds < 1.0:
        return 1e3, "ms"
    return 1.0, "s"


MAX_TIMELINE_GPUS = 16
CROWDED_ROW_BARS = 2000


def timeline_plot(timeline: Timeline, path: Path, title: str) -> Path:
    """One row per GPU and stream: compute kernels and communication over the step.

    Thin white edges separate consecutive tasks (layers, gradient buckets).
    Beyond 16 GPUs only the first 16 are drawn, and the title says so.
    """
    ranks = sorted({iv.rank for iv in timeline.intervals})
    if ranks and ranks[-1] + 1 > len(ranks):
        title = f"{title}\n(one GPU per pipeline stage; the other GPUs of each stage do the same work)"
    if len(ranks) > MAX_TIMELINE_GPUS:
        title = f"{title} (first {MAX_TIMELINE_GPUS} of {len(ranks)} GPUs)"
        ranks = ranks[:MAX_TIMELINE_GPUS]
    factor, unit = _scale(timeline.end_s)

    def row_name(stream: str) -> str:
        return "pp send/recv" if stream.startswith("pp_") else stream      # one row for the pipeline's transfers

    shown, names = _collapse_identical(timeline, ranks, row_name)
    rows = sorted({(iv.rank, row_name(iv.stream)) for iv in timeline.intervals if iv.rank in shown})
    row_of = {row: y for y, row in enumerate(rows)}
    spans, used = _bar_spans(timeline, shown, lambda iv: row_of[(iv.rank, row_name(iv.stream))], factor)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    # Rows too crowded for the white task edges (thousands of bars) draw bars closer
    # than a fifth of a pixel as one: the same picture, far fewer shapes.
    pixel = timeline.end_s * factor / (11 * 120) if timeline.end_s > 0 else 0.0
    for (y, colour), bars in spans.items():
        crowded = len(bars) >= CROWDED_ROW_BARS
        if crowded:
            bars = _merge_spans(bars, 0.2 * pixel)
        # White task edges only where bars are several pixels wide: on many thin bars (many
        # micro-batches) the edges would wash the colour out and no longer match the legend.
        thin = sorted(w for _, w in bars)[len(bars) // 2] < 4 * pixel if bars else True
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour, edgecolor="white",
                       linewidth=0.0 if crowded or thin else 0.3)
    ax.set_yticks(range(len(rows)), [f"{names[r]} {s}" for r, s in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"time in step ({unit})")
    ax.set_xlim(0, timeline.end_s * factor)
    ax.set_title(title)
    kinds = [k for k in COLOURS if k in used]          # only what the plot shows
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in kinds]
    ax.legend(handles, kinds, loc="upper center", bbox_to_anchor=(0.5, -0.05 - 0.9 / max(1, len(rows))),
              ncol=max(1, len(kinds)), frameon=False)
    return save_figure(fig, path, whole_legend=True)      # the legend below the axes is never cut


def _bar_spans(timeline: Timeline, shown: set[int], row_of, factor: float
               ) -> tuple[dict[tuple[int, str], list[tuple[float, float]]], set[str]]:
    """One bar collection per row and colour (tens of thousands of tasks draw quickly), in the
    plot's time unit (`factor` per second), and the kinds of work drawn."""
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    used: set[str] = set()
    for iv in timeline.intervals:
        if iv.rank in shown and iv.end_s > iv.start_s:
            kind = iv.kind if iv.kind in COLOURS else "comm"
            used.add(kind)
            spans.setdefault((row_of(iv), COLOURS[kind]), []).append((iv.start_s * factor, iv.duration_s * factor))
        if iv.rank in shown and iv.kind in GPU_WORK and iv.start_s > iv.ready_s:
            # host-bound: the kernel's inputs were ready, its launch was not (costs/host.py)
            used.add("waiting for host")
            spans.setdefault((row_of(iv), COLOURS["waiting for host"]), []).append(
                (iv.ready_s * factor, (iv.start_s - iv.ready_s) * factor))
    return spans, used


def _collapse_identical(timeline: Timeline, ranks: list[int], row_name) -> tuple[set[int], dict[int, str]]:
    """Ranks whose every interval is the same drawn once: the first of each group, named with how
    many GPUs it stands for ('GPU 0 (x8, identical)'). Ranks can only be identical when they have
    as many intervals, starting and ending at the same times, so only those are compared in full."""
    seen: dict[int, list] = {r: [0, float("inf"), float("-inf")] for r in ranks}   # count, first start, last end
    for iv in timeline.intervals:
        known = seen.get(iv.rank)
        if known is not None:
            known[0] += 1
            if iv.start_s < known[1]:
                known[1] = iv.start_s
            if iv.end_s > known[2]:
                known[2] = iv.end_s
    alike: dict[tuple, list[int]] = {}
    for r in ranks:
        count, first, last = seen[r]
        alike.setdefault((count, round(first, 12), round(last, 12)), []).append(r)
    signature: dict[int, list] = {r: [] for same in alike.values() if len(same) > 1 for r in same}
    for iv in timeline.intervals:
        if iv.rank in signature:
            signature[iv.rank].append((row_name(iv.stream), iv.kind, round(iv.start_s, 12), round(iv.end_s, 12)))
    groups: dict[tuple, list[int]] = {}
    for r in ranks:
        groups.setdefault(tuple(sorted(signature[r])) if r in signature else ("alone", r), []).append(r)
    names = {}
    for members in groups.values():
        names[members[0]] = f"GPU {members[0]}" + (f" (x{len(members)}, identical)" if len(members) > 1 else "")
    return set(names), names


def _merge_spans(bars: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) spans with gaps of at most `gap` between them joined into one."""
    if gap <= 0 or len(bars) < 2:
        return bars
    merged: list[list[float]] = []
    for start, width in sorted(bars):
        if merged and start - (merged[-1][0] + merged[-1][1]) <= gap:
            merged[-1][1] = max(merged[-1][1], start + width - merged[-1][0])
        else:
            merged.append([start, width])
    return [(a, b) for a, b in merged]


def scaling_plot(points: list[dict], path: Path, title: str) -> Path:
    """Scaling efficiency (per-GPU throughput vs one GPU) against GPU count."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
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
    pos = _ordered_layout(graph)
    colours = {"gpu": "#76B900", "pcie_switch": "#4C72B0", "cpu": "#C44E52", "host_memory": "#937860",
               "nvswitch": "#8172B2", "nic": "#DD8452"}
    fig, ax = plt.subplots(figsize=(11, 6))
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
