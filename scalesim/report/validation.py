"""Table and parity plot for `scalesim validate`."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.table import Table  # noqa: E402


# Errors beyond the validation goal's maximum get their explanation printed.
FAR_OFF = 0.25


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def validation_table(outcomes, summaries: dict) -> list[Table]:
    cases = Table(title="predicted vs measured (error = (predicted - measured) / measured)", title_justify="left")
    for col in ("case", "category", "metric", "predicted", "measured", "error", "status"):
        cases.add_column(col, overflow="fold")
    for o in outcomes:
        status = o.status if o.reason is None else f"{o.status}: {o.reason}"
        if o.case.supplementary:
            status += " (supplementary)"
        cases.add_row(o.case.id, o.case.category, o.case.metric,
                      "-" if o.predicted is None else f"{o.predicted:,.4g}", f"{o.case.measured:,.4g}",
                      _pct(o.error), status)
    summary = Table(title="summary (absolute errors over simulated cases; overall = the shared reference set)",
                    title_justify="left")
    for col in ("category", "simulated", "median |error|", "max |error|"):
        summary.add_column(col)
    for name, s in summaries.items():
        summary.add_row(name, str(s.count),
                        "-" if s.median_abs_error is None else f"{100 * s.median_abs_error:.1f}%",
                        "-" if s.max_abs_error is None else f"{100 * s.max_abs_error:.1f}%")
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
    # Alternate label sides along the diagonal so neighbouring cases stay legible.
    for i, o in enumerate(sorted(points, key=lambda o: o.case.measured)):
        offset = [(4, 4), (4, -9), (-4, 4), (-4, -9)][i % 4]
        ax.annotate(o.case.id, (o.case.measured, o.predicted), fontsize=5.5, xytext=offset,
                    textcoords="offset points", ha="left" if offset[0] > 0 else "right")
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
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


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
