"""The step timeline plot: one row per GPU and stream, compute kernels and communication over the step.

A large step has hundreds of thousands of intervals: they are grouped in one pass and drawn as
one polygon collection per row and colour, built from arrays (what `Axes.broken_barh` draws,
without its per-bar unit conversion); rows of bars without edges as the union of the whole pixels
Agg would paint bar by bar (`_PixelBars`).
"""

from __future__ import annotations

from pathlib import Path as FilePath

from scalesim.report.figures import new_figure, save_figure  # first: it makes matplotlib's import cheaper

import numpy as np  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.path import Path  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from scalesim.report.timeline_rows import Columns, bar_spans, columns, identical_ranks, rows_of  # noqa: E402
from scalesim.timeline import Timeline  # noqa: E402

COLOURS = {"forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B2",
           "optimizer": "#C44E52", "other": "#937860", "comm": "#DD8452",
           "waiting for host": "#C8C8C8"}   # GPU work ready but not yet issued by the CPU
GPU_WORK = ("forward", "backward", "recompute", "optimizer", "other")
WAITING = COLOURS["waiting for host"]

MAX_TIMELINE_GPUS = 16
LEGEND_BELOW_PT = 40          # the legend's top under the axes: past the tick labels and the axis label
CROWDED_ROW_BARS = 2000


def _scale(seconds: float) -> tuple[float, str]:
    if seconds < 1e-3:
        return 1e6, "µs"
    if seconds < 1.0:
        return 1e3, "ms"
    return 1.0, "s"


# What a planner's internal stream name reads as on a row (FSDP1's streams: parallel/fsdp.py, fsdp_limiter.py).
STREAM_LABELS = {"fsdp_post_backward": "fsdp post-backward", "fsdp_unshard": "fsdp unshard"}


def _row_name(stream: str) -> str:
    """The row a stream is drawn on: one row for the pipeline's transfers; words, not identifiers."""
    if stream.startswith("pp_"):
        return "pp send/recv"
    return STREAM_LABELS.get(stream, stream.replace("_", " "))


def timeline_plot(timeline: Timeline, path: FilePath, title: str) -> FilePath:
    """One row per GPU and stream: compute kernels and communication over the step.

    Thin white edges separate consecutive tasks (layers, gradient buckets).
    Beyond 16 GPUs only the first 16 are drawn, and the title says so.
    """
    return timeline_columns_plot(columns(timeline), timeline.end_s, path, title)


def timeline_columns_plot(cols: Columns, end_s: float, path: FilePath, title: str) -> FilePath:
    """`timeline_plot` of a step given as `columns(timeline)` and its end (report/timeline_rows.py)."""
    ranks = np.unique(cols.rank).tolist()
    if ranks and ranks[-1] + 1 > len(ranks):
        title = f"{title}\n(one GPU per pipeline stage; the other GPUs of each stage do the same work)"
    if len(ranks) > MAX_TIMELINE_GPUS:
        title = f"{title} (first {MAX_TIMELINE_GPUS} of {len(ranks)} GPUs)"
        ranks = ranks[:MAX_TIMELINE_GPUS]
    factor, unit = _scale(end_s)
    shown, names = identical_ranks(cols, ranks, _row_name)
    rows = rows_of(cols, shown, _row_name)
    row_of = {row: y for y, row in enumerate(rows)}
    spans, used = bar_spans(cols, shown, lambda rank, stream: row_of[(rank, _row_name(stream))], COLOURS,
                            GPU_WORK, "waiting for host", "comm")
    fig, ax = new_figure((11, 0.45 * len(rows) + 1.6))
    # Rows too crowded for the white task edges (thousands of bars) draw bars closer
    # than a fifth of a pixel as one: the same picture, far fewer shapes.
    pixel = end_s * factor / (11 * 120) if end_s > 0 else 0.0
    corners = [_draw_row(ax, y, colour, starts, ends, factor, pixel) for (y, colour), (starts, ends) in spans.items()]
    if corners:       # the data limits add_collection would find path by path, from each row's corners
        ax.update_datalim([xy for corner in corners for xy in corner])
        ax.autoscale_view()
    ax.set_yticks(range(len(rows)), [f"{names[r]} {s}" for r, s in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"time in step ({unit})")
    ax.set_xlim(0, end_s * factor)
    ax.set_title(title)
    kinds = [k for k in COLOURS if k in used]          # only what the plot shows
    handles = [Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in kinds]
    # a fixed distance under the axes, below the tick labels and the axis label, whatever the row count
    # (a fraction of the axes' height put it an inch down on a one-row plot, which tight_layout refused)
    below = offset_copy(ax.transAxes, fig=fig, y=-LEGEND_BELOW_PT, units="points")
    ax.legend(handles, kinds, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below,
              ncol=max(1, len(kinds)), frameon=False)
    return save_figure(fig, path, whole_legend=True)      # the legend below the axes is never cut


def _draw_row(ax, y: int, colour: str, start_s: np.ndarray, end_s: np.ndarray, factor: float, pixel: float
              ) -> tuple[tuple[float, float], tuple[float, float]]:
    """The bars of one row and colour as one PolyCollection (`broken_barh`'s shapes, in the plot's unit);
    returns the lower-left and upper-right corners of what it drew."""
    x0, dx = start_s * factor, (end_s - start_s) * factor
    crowded = len(x0) >= CROWDED_ROW_BARS
    if crowded:
        if pixel > 0 and len(x0) > 1:
            x0, dx = _merged(x0, dx, 0.2 * pixel)
    # White task edges only where bars are several pixels wide: on many thin bars (many
    # micro-batches) the edges would wash the colour out and no longer match the legend.
    thin = np.sort(dx)[len(dx) // 2] < 4 * pixel if len(dx) else True
    x1 = x0 + dx
    y0 = y - 0.4
    y1 = y0 + ((y0 + 0.8) - np.float64(y0))          # as broken_barh converts the height
    if not (crowded or thin):
        vertices = np.empty((len(x0), 4, 2))
        vertices[:, 0, 0] = vertices[:, 1, 0] = x0
        vertices[:, 2, 0] = vertices[:, 3, 0] = x1
        vertices[:, 0, 1] = vertices[:, 3, 1] = y0
        vertices[:, 1, 1] = vertices[:, 2, 1] = y1
        ax.add_collection(PolyCollection(vertices, facecolors=colour, edgecolor="white", linewidth=0.3),
                          autolim=False)
    else:
        ax.add_collection(_PixelBars(x0, x1, y0, float(y1), colour), autolim=False)
    return (float(min(x0.min(), x1.min())), y0), (float(max(x0.max(), x1.max())), float(y1))


class _PixelBars(PolyCollection):
    """Bars without edges, drawn as Agg draws each of them alone, in one pass.

    Agg snaps a small rectangle of a collection to whole pixels (its x and y rounded, `floor(v + 0.5)`,
    matplotlib's PathSnapper): a bar then covers whole pixels of its colour or nothing. So the bars
    of one colour paint the union of their snapped pixel spans, whatever their number: at draw time
    (the axes' transform known) they are snapped here the same way, the empty ones dropped and the
    touching ones joined, and the union drawn as one compound path with snapping on (matplotlib
    snaps a path of over 1,024 vertices only when told). A bar whose edge falls within a rounding
    error of half a pixel is drawn as given, for Agg to decide. The same picture, pixel for pixel;
    other renderers draw every bar."""

    def __init__(self, x0: np.ndarray, x1: np.ndarray, y0: float, y1: float, colour: str):
        super().__init__([], facecolors=colour, edgecolor="none", linewidth=(0.0, 0.0), snap=True)
        # two (equal) line widths: one path drawn once, not stamped as a marker (Collection.draw)
        self._bars = (x0, x1, y0, y1)
        self._set_bars(x0, x1)

    def _set_bars(self, x0: np.ndarray, x1: np.ndarray) -> None:
        _, _, y0, y1 = self._bars
        vertices = np.empty((len(x0), 5, 2))
        vertices[:, 0, 0] = vertices[:, 1, 0] = vertices[:, 4, 0] = x0
        vertices[:, 2, 0] = vertices[:, 3, 0] = x1
        vertices[:, 0, 1] = vertices[:, 3, 1] = vertices[:, 4, 1] = y0
        vertices[:, 1, 1] = vertices[:, 2, 1] = y1
        codes = np.tile(np.array([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY],
                                 dtype=Path.code_type), len(x0))
        self.set_verts_and_codes([vertices.reshape(-1, 2)], [codes])

    def draw(self, renderer) -> None:
        from matplotlib.backends.backend_agg import RendererAgg

        x0, x1, y0, _ = self._bars
        transform = self.get_transform()
        if isinstance(renderer, RendererAgg) and transform.is_affine and len(x0):
            self._set_bars(*_snapped_union(x0, x1, y0, transform))
        else:
            self._set_bars(x0, x1)
        super().draw(renderer)


def _snapped_union(x0: np.ndarray, x1: np.ndarray, y: float, transform) -> tuple[np.ndarray, np.ndarray]:
    """The bars [x0, x1) as Agg snaps them to whole pixels, empty ones dropped and overlapping or
    touching ones joined, back in data coordinates; bars with an edge at a half pixel kept as given."""
    ys = np.full(len(x0), y)
    left = transform.transform(np.column_stack((x0, ys)))[:, 0]
    right = transform.transform(np.column_stack((x1, ys)))[:, 0]
    unsure = (np.abs((left % 1.0) - 0.5) < 1e-6) | (np.abs((right % 1.0) - 0.5) < 1e-6)
    a, b = np.floor(left[~unsure] + 0.5), np.floor(right[~unsure] + 0.5)
    full = b > a
    a, b = a[full], b[full]
    if len(a):
        a, width = _merged(a, b - a, 0.0)          # whole pixels: exact in floats
        b = a + width
    back = transform.inverted()
    pixel_y = transform.transform([(0.0, y)])[0, 1]
    a = back.transform(np.column_stack((a, np.full(len(a), pixel_y))))[:, 0]
    b = back.transform(np.column_stack((b, np.full(len(b), pixel_y))))[:, 0]
    return np.concatenate((a, x0[unsure])), np.concatenate((b, x1[unsure]))


def _merge_spans(bars: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """(start, width) spans with gaps of at most `gap` between them joined into one."""
    if gap <= 0 or len(bars) < 2:
        return bars
    starts, widths = _merged(np.array([a for a, _ in bars]), np.array([b for _, b in bars]), gap)
    return list(zip(starts.tolist(), widths.tolist()))


def _merged(x0: np.ndarray, dx: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """`_merge_spans` on arrays: in (start, width) order, a span starting more than `gap` after the
    furthest end so far begins a new bar; each bar is as wide as its furthest end."""
    order = np.lexsort((dx, x0))
    start, width = x0[order], dx[order]
    end = start + width
    new = np.empty(len(start), dtype=bool)
    new[:1] = True
    new[1:] = start[1:] - np.maximum.accumulate(end)[:-1] > gap
    first = np.flatnonzero(new)
    reach = end - start[first][np.cumsum(new) - 1]
    reach[first] = width[first]
    return start[first], np.maximum.reduceat(reach, first)
