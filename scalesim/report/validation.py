"""Table and parity plot for `scalesim validate`."""

from __future__ import annotations

import math
from pathlib import Path

from scalesim.report import figures  # noqa: F401 (first: it makes matplotlib's import cheaper)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text as mtext  # noqa: E402
from rich.table import Table  # noqa: E402

from scalesim.report.figures import save_figure  # noqa: E402

# Errors beyond the validation goal's maximum get their explanation printed.
FAR_OFF = 0.25


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _pct_abs(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


APART = ("in_sample", "disputed", "supplementary", "serving")      # summary rows beside the headline


def validation_json(outcomes, summaries: dict, loso: dict, replaced: dict) -> dict:
    """`validate --json`: every case (with its out-of-sample prediction), the headline summary with
    its leave-one-source-out figures, the categories, and the rows kept apart."""
    def case(i, o):
        out = replaced.get(i, o)
        return {**o.to_json(), "loso_predicted": out.predicted, "loso_error": out.error}

    overall = loso["overall"]
    return {"cases": [case(i, o) for i, o in enumerate(outcomes)],
            "summary": {**summaries["overall"].to_json(), "loso_median_abs_error": overall.median_abs_error,
                        "loso_max_abs_error": overall.max_abs_error, "loso_count": overall.count},
            "loso_by_category": {k: v.to_json() for k, v in loso.items() if k != "overall"},
            "by_category": {k: v.to_json() for k, v in summaries.items() if k not in ("overall", *APART)},
            **{k: summaries[k].to_json() for k in APART if k in summaries},
            # measured training runs (they all trained) that `run` would call does-not-fit
            "predicted_not_to_fit": [o.case.id for o in outcomes if o.fits is False]}


def validation_table(outcomes, summaries: dict, loso: dict | None = None) -> list[Table]:
    """The cases, then the summary: in-sample figures and, per category and overall, the
    leave-one-source-out ones (`loso`: each source predicted with constants fitted without it)."""
    loso = loso or {}
    cases = Table(title="predicted vs measured (error = (predicted - measured) / measured)", title_justify="left")
    for col in ("case", "category", "metric", "predicted", "measured", "error", "status"):
        cases.add_column(col, overflow="fold")
    for o in outcomes:
        status = o.status if o.reason is None else f"{o.status}: {o.reason}"
        if o.case.supplementary:
            status += " (supplementary)"
        if o.case.fitted_on:
            status += " (in-sample: fitted on)"
        if o.case.disputed:
            status += f" (disputed: {o.case.disputed})"
        if o.fits is False:
            status += " (predicted not to fit, though it trained)"
        cases.add_row(o.case.id, o.case.category, o.case.metric,
                      "-" if o.predicted is None else f"{o.predicted:,.4g}", f"{o.case.measured:,.4g}",
                      _pct(o.error), status)
    summary = Table(title="summary (absolute errors over simulated cases; overall = reference cases no constant "
                          "was fitted on; in_sample, disputed and supplementary apart; out of sample = reference "
                          "and in-sample cases, each source predicted with constants fitted without it)",
                    title_justify="left")
    for col in ("category", "simulated", "median |error|", "max |error|",
                "out of sample: n", "median |error|", "max |error|"):
        summary.add_column(col)
    for name, s in summaries.items():
        out = loso.get(name)
        summary.add_row(name, str(s.count), _pct_abs(s.median_abs_error), _pct_abs(s.max_abs_error),
                        *(("-", "-", "-") if out is None else
                          (str(out.count), _pct_abs(out.median_abs_error), _pct_abs(out.max_abs_error))))
    tables = [cases, summary]
    far = [o for o in outcomes if o.error is not None and abs(o.error) > FAR_OFF]
    if far:
        why = Table(title=f"cases off by more than {FAR_OFF:.0%}, and what is known (each counts in its summary row)",
                    title_justify="left")
        for col in ("case", "error", "known"):
            why.add_column(col, overflow="fold")
        for o in sorted(far, key=lambda o: -abs(o.error)):
            why.add_row(o.case.id, _pct(o.error), o.case.known_miss or "not investigated yet")
        tables.append(why)
    return tables


def parity_plot(outcomes, path: Path) -> Path:
    """Predicted against measured on log-log axes, each point labelled, the ±10% band shaded."""
    points = [o for o in outcomes if o.predicted is not None]
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(18, max(8, 0.2 * len(points) + 2)),
                                   gridspec_kw={"width_ratios": [1.1, 1]})
    colours = {"collective": "#4C72B0", "single_gpu": "#55A868", "multi_gpu": "#DD8452", "multi_node": "#C44E52"}
    _error_bars(bars, points, colours)
    # Each metric has its own unit; normalise by the measured value's scale so all share one plot.
    lo = min([min(o.predicted, o.case.measured) for o in points], default=1.0) / 2
    hi = max([max(o.predicted, o.case.measured) for o in points], default=10.0) * 2
    xs = [lo, hi]
    ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="grey", alpha=0.2, label="±10%")
    ax.plot(xs, xs, color="grey", linewidth=1)
    for category, colour in colours.items():
        chosen = [o for o in points if o.case.category == category and not o.case.supplementary]
        ax.scatter([o.case.measured for o in chosen], [o.predicted for o in chosen], color=colour,
                   label=category, zorder=3)
    extra = [o for o in points if o.case.supplementary]
    if extra:
        ax.scatter([o.case.measured for o in extra], [o.predicted for o in extra], facecolors="none",
                   edgecolors=[colours.get(o.case.category, "grey") for o in extra],
                   label="supplementary (open)", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (case's own unit: GB/s, samples/s, tokens/s/GPU, TFLOP/s or s)")
    ax.set_ylabel("predicted (same unit)")
    ax.set_title("scalesim validate: predicted vs published measurements")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left")
    fig.tight_layout()
    _label_points(fig, ax, [(o.case.id, o.case.measured, o.predicted) for o in points])
    return save_figure(fig, path, tight_layout=False, dpi=130)


# Where a label may go, in points from its marker: near first, then further out
# along 24 directions (a thin leader line joins a far label to its point).
_LABEL_RADII_PT = (5, 12, 22, 34, 48, 64, 82, 104, 130, 160, 200, 250)
_LABEL_DIRECTIONS = tuple((math.cos(math.radians(a)), math.sin(math.radians(a)))
                          for a in (0, 180, 30, -30, 150, -150, 60, -60, 120, -120, 90, -90,
                                    15, -15, 165, -165, 45, -45, 135, -135, 75, -75, 105, -105))
_LEADER_FROM_PT = 12
_MARKER_HALF_PT = 3.5


def _label_points(fig, ax, labelled: list[tuple[str, float, float]]) -> None:
    """Label each point where its text overlaps no other label, no marker and stays in the axes.

    Greedy, densest region first: clustered cases (SC21's GPT sizes sit within
    a few percent of each other) get the free space before isolated ones. Where
    no spot is free, the least-overlapping one is taken.
    """
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    px_per_pt = fig.dpi / 72.0
    markers = [tuple(ax.transData.transform((x, y))) for _, x, y in labelled]
    half = _MARKER_HALF_PT * px_per_pt
    marker_boxes = [(mx - half, my - half, mx + half, my + half) for mx, my in markers]

    def crowding(i: int) -> int:
        mx, my = markers[i]
        return sum(1 for x, y in markers if abs(x - mx) < 60 * px_per_pt and abs(y - my) < 60 * px_per_pt)

    placed: list[tuple[float, float, float, float]] = []
    for i in sorted(range(len(labelled)), key=lambda i: (-crowding(i), labelled[i][1])):
        name, x, y = labelled[i]
        text = ax.annotate(name, (x, y), xytext=(0, 0), textcoords="offset points", fontsize=5.5, va="center",
                           arrowprops=dict(arrowstyle="-", color="grey", linewidth=0.4, shrinkA=0, shrinkB=2))
        size = mtext.Text.get_window_extent(text, renderer)     # the text alone, not its leader line
        width, height = size.width, size.height
        mx, my = markers[i]
        best = None
        for radius in _LABEL_RADII_PT:
            for dx, dy in _LABEL_DIRECTIONS:
                ha = "left" if dx > 0.1 else "right" if dx < -0.1 else "center"
                cx, cy = mx + dx * radius * px_per_pt, my + dy * radius * px_per_pt
                x0 = {"left": cx, "right": cx - width, "center": cx - width / 2}[ha]
                box = (x0, cy - height / 2, x0 + width, cy + height / 2)
                inside = frame.x0 <= box[0] and box[2] <= frame.x1 and frame.y0 <= box[1] and box[3] <= frame.y1
                cost = (0.0 if inside else 1e12) + sum(_overlap(box, other) for other in placed)
                cost += sum(_overlap(box, other) for other in marker_boxes)
                if best is None or cost < best[0]:
                    best = (cost, (dx * radius, dy * radius), ha, box)
                if cost == 0:
                    break
            if best[0] == 0:
                break
        _, offset, ha, box = best
        text.xyann = offset
        text.set_ha(ha)
        text.arrow_patch.set_visible(math.hypot(*offset) >= _LEADER_FROM_PT)
        placed.append(box)


def _overlap(box: tuple[float, float, float, float], other: tuple[float, float, float, float]) -> float:
    """Overlapping area of two (x0, y0, x1, y1) boxes, in pixels squared."""
    width = min(box[2], other[2]) - max(box[0], other[0])
    height = min(box[3], other[3]) - max(box[1], other[1])
    return width * height if width > 0 and height > 0 else 0.0


def _error_bars(ax, points, colours: dict) -> None:
    """Each case's error as a bar, sorted, so every label stays legible where the parity plot crowds."""
    ordered = sorted(points, key=lambda o: o.error)
    ys = range(len(ordered))
    ax.barh(list(ys), [100 * o.error for o in ordered], color=[colours.get(o.case.category, "grey") for o in ordered],
            hatch=["//" if o.case.supplementary else "" for o in ordered])
    ax.set_yticks(list(ys), [o.case.id + (" (suppl.)" if o.case.supplementary else "") for o in ordered],
                  fontsize=6.5)
    for limit, style in ((10, ":"), (25, "--")):
        for sign in (-1, 1):
            ax.axvline(sign * limit, color="grey", linestyle=style, linewidth=0.8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("error (%): (predicted - measured) / measured; dotted ±10%, dashed ±25%")
    ax.set_title("error per case")
    ax.grid(alpha=0.3, axis="x")
    ax.set_ylim(-0.8, len(ordered) - 0.2)
