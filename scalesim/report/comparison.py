"""Side-by-side comparison of designs: terminal table and plots.

Reads the comparison rows `scalesim.app.compare` assembles (plain dicts, the
same as `scalesim compare --json`); never simulates. Plots (PNG, matplotlib
Agg): scaling efficiency against GPU count, time and cost to train as bars,
cost against time with the Pareto front marked, and the step breakdown as
stacked bars.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from scalesim.report import figures  # noqa: F401 (first: it makes matplotlib's import cheaper)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from scalesim.result import pareto_front  # noqa: E402
from scalesim.report.figures import efficiency_ylim, hollow_unfit, save_figure  # noqa: E402
from scalesim.report.formatting import (NO_FIT, bold_flags, duration, money, percent, plan_notes,  # noqa: E402
                                        scaling_texts, unit_price, unpriced_notes)
from scalesim.units import format_bytes  # noqa: E402

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B2", "#937860", "#DA8BC3", "#8C8C8C",
           "#CCB974", "#64B5CD")
PARTS = (("compute", "compute", "#4C72B0"), ("exposed_comm", "exposed communication", "#DD8452"),
         ("bubble", "idle / pipeline bubble", "#8C8C8C"), ("other", "optimizer and other", "#C44E52"))


def _range(p: dict | None, fmt) -> str:
    if not p:
        return "n/a"
    return f"{fmt(p['p10'])} – {fmt(p['p90'])}"


def _if_fits(rows: list[dict], key: str) -> list[float | None]:
    """The row's values where the design fits, None where it does not: what may be bold."""
    return [r.get(key) if r["fits"] else None for r in rows]


def _mark(rows: list[dict], values: list[str]) -> list[str]:
    """Values of designs that do not fit, marked so (a time or cost it cannot achieve)."""
    return [v if r["fits"] else f"{v} ({NO_FIT})" for r, v in zip(rows, values)]


ABOVE_LINEAR = ("Scaling efficiency above 100%: the plan splits work one GPU does whole (ZeRO: each GPU "
                "updates 1/N of the optimizer state)")


def _months(r: dict) -> str:
    """Break-even, or which input it lacks ('never' only when renting really stays cheaper)."""
    lacks = next((why for key, why in (("time_to_train_s", "training budget"), ("purchase_usd", "GPU price"),
                                       ("gpu_hour_usd", "GPU-hour price")) if key in r and r[key] is None), None)
    if lacks:
        return f"n/a (no {lacks})"
    months = r.get("break_even_months")
    return "never (renting is cheaper)" if months is None else f"{months:,.1f} months"


def compare_table(rows: list[dict], uncertainty: dict | None = None) -> Table:
    """Designs side by side (one column each): plan, step, throughput, MFU, scaling, memory fit,
    time, cost, energy. The best value of each time, cost and energy row among the designs that
    fit is bold; a design that does not fit is never bold and its values say so."""
    above = any((r.get("scaling_efficiency") or 0) > 1 for r in rows)
    t = Table(title="comparison", title_justify="left", caption_justify="left",
              caption="cloud = GPU-hours x price; owned = amortised purchase + electricity; both include "
                      "failures, restarts and checkpoint writes. Bold: best of the row among designs that fit."
                      + (f" {ABOVE_LINEAR}." if above else "") + f" {plan_notes([r.get('plan') for r in rows])}"
                      + "".join(f" {k[0].upper()}{k[1:]}: {v}." for k, v in unpriced_notes(rows).items()))
    t.add_column("metric", style="bold", no_wrap=True)
    for r in rows:
        t.add_column(escape(r["scenario"]), justify="right", overflow="fold", ratio=1)

    def add(name: str, values: list[str], best: list[float | None] | None = None, lowest: bool = True) -> None:
        cells = [escape(str(v)) for v in values]      # the user's names, printed as written
        flags = bold_flags(best, lowest, len(values))
        t.add_row(name, *[f"[bold]{c}[/bold]" if b else c for c, b in zip(cells, flags)])

    for name, values, best, lowest in summary_rows(rows, uncertainty):
        add(name, values, best, lowest)
    return t


def summary_rows(rows: list[dict], uncertainty: dict | None = None) -> list[tuple]:
    """(metric, values as text, values to pick the best from (or None), lower is better) per row:
    the one list the terminal table, the HTML page and the CSV read."""
    out = [
        ("GPUs", [f"{r['gpus']} x {r['gpu']}" for r in rows], None, True),
        ("model", [str(r.get("model", "")) for r in rows], None, True),
        ("training budget", [r.get("tokens") or "n/a" for r in rows], None, True),
        ("plan" + (" (best found)" if any(r.get("plan_searched") for r in rows) else ""),
         [r.get("plan") or "n/a" for r in rows], None, True),
        ("memory per GPU", [f"{format_bytes(r['memory_per_gpu_bytes'])} of {format_bytes(r['memory_capacity_bytes'])}"
                            + (" (fits)" if r["fits"] else f" ({NO_FIT})") for r in rows], None, True),
        ("step time", _mark(rows, [duration(r["step_time_s"]) for r in rows]), _if_fits(rows, "step_time_s"), True),
        ("throughput", _mark(rows, [f"{r['tokens_per_s']:,.0f} tokens/s" if r.get("tokens_per_s")
                                    else f"{r['samples_per_s']:,.1f} samples/s" for r in rows]),
         [(r.get("tokens_per_s") or r["samples_per_s"]) if r["fits"] else None for r in rows], False),
        ("MFU", [percent(r["mfu"]) for r in rows], _if_fits(rows, "mfu"), False),
        ("scaling efficiency", scaling_texts(rows),     # a 1-GPU design's 100% is no best
         [None if r["gpus"] == 1 else v for r, v in zip(rows, _if_fits(rows, "scaling_efficiency"))], False),
        ("time to train", _mark(rows, [duration(r["time_to_train_s"]) for r in rows]),
         _if_fits(rows, "time_to_train_s"), True),
        ("GPU-hour price (cloud)", [unit_price(r.get("gpu_hour_usd")) for r in rows], None, True),
        ("cost (cloud)", _mark(rows, [money(r["cost_usd"]) for r in rows]), _if_fits(rows, "cost_usd"), True),
        ("purchase price (GPUs, servers, network)", [money(r.get("purchase_usd")) for r in rows],
         _if_fits(rows, "purchase_usd"), True),
        ("cost (owned)", _mark(rows, [money(r["on_prem_cost_usd"]) for r in rows]),
         _if_fits(rows, "on_prem_cost_usd"), True),
        ("owning beats renting after", [_months(r) if r["fits"] else NO_FIT for r in rows],
         _if_fits(rows, "break_even_months"), True),
        ("cloud $ per M tokens", _mark(rows, ["n/a" if r.get("usd_per_million_tokens") is None
                                              else f"${r['usd_per_million_tokens']:.4f}" for r in rows]),
         _if_fits(rows, "usd_per_million_tokens"), True),
        ("energy (GPUs + hosts)", _mark(rows, ["n/a" if r["energy_kwh"] is None else f"{r['energy_kwh']:,.1f} kWh"
                                               for r in rows]), _if_fits(rows, "energy_kwh"), True),
        ("goodput (failures)", [percent(r["goodput"]) for r in rows], None, True),
    ]
    if uncertainty:
        d, w = uncertainty["designs"], uncertainty["wins"]
        n = uncertainty["samples"]
        fit = [r["fits"] for r in rows]
        out += [
            (f"time P10–P90 ({n} samples)", _mark(rows, [_range(x["time_to_train_s"], duration) for x in d]), None,
             True),
            ("cloud cost P10–P90", _mark(rows, [_range(x["cost_usd"], money) for x in d]), None, True),
            ("owned cost P10–P90", _mark(rows, [_range(x["on_prem_cost_usd"], money) for x in d]), None, True),
        ] + [(name, [percent(x) if f else NO_FIT for x, f in zip(w[key], fit)],
              [x if f else None for x, f in zip(w[key], fit)], False)
             for name, key in (("fastest in", "time_to_train_s"), ("cheapest (cloud) in", "cost_usd"),
                               ("cheapest (owned) in", "on_prem_cost_usd"))]
    return out


def write_compare_csv(rows: list[dict], path: Path) -> Path:
    """The comparison table as CSV: one line per design, the plain values of `compare --json`'s table."""
    import csv

    keys = [k for k in rows[0] if k not in ("scaling", "breakdown_s")] if rows else []
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: "" if r.get(k) is None else r.get(k) for k in keys})
    return path


def short_name(name: str) -> str:
    """The hardware part of a scenario name: '8x RTX 4090 (PCIe ...), DDP' -> '8x RTX 4090'.

    >>> short_name("8x RTX 4090 (PCIe 4.0, no P2P), DDP, GPT-2 350M")
    '8x RTX 4090'
    """
    return name.split(" (")[0].split(",")[0].strip() or name


def _design_label(r: dict) -> str:
    return r["scenario"] + ("" if r.get("fits", True) else f" ({NO_FIT})")


def _labels(rows: list[dict], width: int = 22) -> list[str]:
    return [textwrap.fill(_design_label(r), width) for r in rows]


def _short_labels(rows: list[dict], width: int = 18) -> list[str]:
    """The hardware part of each name where that tells the designs apart (the full names are in
    the table and the other plots' legends), else the whole name; wrapped to `width`."""
    short = [short_name(r["scenario"]) for r in rows]
    if len(set(short)) < len(short):
        short = [r["scenario"] for r in rows]
    return [textwrap.fill(name + ("" if r.get("fits", True) else f" ({NO_FIT})"), width)
            for name, r in zip(short, rows)]


def _hatch(rows: list[dict]) -> list[str]:
    """Bars of designs that do not fit are hatched (and their labels say so)."""
    return ["xx" if not r.get("fits", True) else "" for r in rows]


def scaling_plot(rows: list[dict], path: Path) -> Path:
    """Scaling efficiency (per-GPU throughput vs one GPU) against GPU count, one line per design."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    ticks: set[int] = set()
    for k, r in enumerate(rows):
        points = r.get("scaling") or []
        if not points:
            continue
        ticks.update(xs := [p["gpus"] for p in points])
        ax.plot(xs, [100 * p["scaling_efficiency"] for p in points], marker="os^Dv<>"[k % 7],
                color=PALETTE[k % len(PALETTE)], linestyle=("-", "--", ":", "-.")[k % 4], linewidth=1.8,
                markersize=7 - k % 3, alpha=0.9, label=_design_label(r))
        hollow_unfit(ax, points, PALETTE[k % len(PALETTE)], "os^Dv<>"[k % 7], markersize=7 - k % 3)
    ax.axhline(100, color="grey", linestyle=":", linewidth=1, label="perfect scaling")
    if ticks and max(ticks) > 16:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks), [str(x) for x in sorted(ticks)])
    ax.set_xlabel("GPUs (same per-GPU batch)")
    ax.set_ylabel("scaling efficiency (% of 1-GPU throughput per GPU)")
    efficiency_ylim(ax, [100 * p["scaling_efficiency"] for r in rows for p in r.get("scaling") or []])
    ax.set_title("Scaling efficiency against GPU count" + ("; hollow: would not fit in memory" if any(
        p.get("fits") is False for r in rows for p in r.get("scaling") or []) else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return save_figure(fig, path, tight_layout=False, whole_legend=True)


def _errorbars(values, percentiles, scale):
    if not percentiles:
        return None
    low, high = [], []
    for v, p in zip(values, percentiles):
        if p is None or v is None or p.get("p10") is None or p.get("p90") is None:
            low.append(0.0)
            high.append(0.0)
        else:
            low.append(max(v - p["p10"] / scale, 0.0))
            high.append(max(p["p90"] / scale - v, 0.0))
    return [low, high]


def _label_above(ax, bars, labels: list[str], err, fontsize: int = 7) -> None:
    """Write each bar's value above the bar or above its P90 whisker, whichever is higher."""
    for i, (bar, label) in enumerate(zip(bars, labels)):
        top = bar.get_height() + (err[1][i] if err else 0.0)
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, top), textcoords="offset points", xytext=(0, 3),
                    ha="center", va="bottom", fontsize=fontsize)


def time_cost_plot(rows: list[dict], path: Path, *, budget: str = "", uncertainty: dict | None = None) -> Path:
    """Time to train (hours) and cost to train (USD, cloud and on-premises) as bars."""
    labels = _short_labels(rows)
    x = list(range(len(rows)))
    # each wrapped name (18 characters at 8 pt, ~1.1 in) needs ~1.3 in under its bars in both panels;
    # no wider than needed: the report scales the picture to its column, and its text with it
    fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(max(12, 2.6 * len(rows) + 2), 4.8))
    hours = [None if r["time_to_train_s"] is None else r["time_to_train_s"] / 3600 for r in rows]
    designs = (uncertainty or {}).get("designs")
    err = _errorbars(hours, [d["time_to_train_s"] for d in designs] if designs else None, 3600)
    bars = ax_t.bar(x, [h or 0 for h in hours], color=[PALETTE[k % len(PALETTE)] for k in x], yerr=err, capsize=4,
                    hatch=_hatch(rows), edgecolor="white")
    _label_above(ax_t, bars, ["n/a" if h is None else f"{h:,.1f} h" for h in hours], err, fontsize=8)
    ax_t.set_xticks(x, labels, fontsize=8)
    ax_t.set_ylabel("time to train (hours, failures included)")
    ax_t.set_title("Time to train" + (f" ({budget})" if budget else ""))
    ax_t.grid(axis="y", alpha=0.3)
    ax_t.margins(y=0.15)

    width = 0.38
    cloud = [r["cost_usd"] for r in rows]
    own = [r["on_prem_cost_usd"] for r in rows]
    err_c = _errorbars(cloud, [d["cost_usd"] for d in designs] if designs else None, 1)
    err_o = _errorbars(own, [d["on_prem_cost_usd"] for d in designs] if designs else None, 1)
    colours = [PALETTE[k % len(PALETTE)] for k in x]           # one colour per design in every panel
    b1 = ax_c.bar([i - width / 2 for i in x], [c or 0 for c in cloud], width, color=colours, yerr=err_c,
                  capsize=3, hatch=_hatch(rows), edgecolor="white")
    b2 = ax_c.bar([i + width / 2 for i in x], [c or 0 for c in own], width, color=colours, yerr=err_o,
                  capsize=3, alpha=0.55, hatch=_hatch(rows), edgecolor="white")
    ax_c.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="grey", label="cloud (GPU-hours x price)"),
                         plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.55,
                                       label="owned (amortised purchase + power)")], fontsize=8, loc="upper left")
    _label_above(ax_c, b1, [money(c) for c in cloud], err_c)
    _label_above(ax_c, b2, [money(c) for c in own], err_o)
    ax_c.set_xticks(x, labels, fontsize=8)
    ax_c.set_ylabel("cost to train (USD)")
    ax_c.set_title("Cost to train" + (f" ({budget})" if budget else ""))
    ax_c.grid(axis="y", alpha=0.3)
    ax_c.margins(y=0.2)
    if designs:
        fig.suptitle(f"error bars: P10–P90 of {uncertainty['samples']} Monte-Carlo samples", fontsize=9, y=0.02)
    return save_figure(fig, path, whole_legend=True)


def pareto_plot(rows: list[dict], path: Path) -> Path:
    """Cost against time to train for each design bought or rented; the Pareto front marked."""
    options = []
    for k, r in enumerate(rows):
        if r["time_to_train_s"] is None:
            continue
        for kind, key, marker in (("cloud", "cost_usd", "o"), ("on-prem", "on_prem_cost_usd", "s")):
            if r[key] is not None:
                options.append((r["time_to_train_s"] / 3600, r[key], k, kind, marker))
    fig, ax = plt.subplots(figsize=(10, 5.2))
    fitting = [i for i, o in enumerate(options) if rows[o[2]].get("fits", True)]
    front = {fitting[j] for j in pareto_front([(options[i][0], options[i][1]) for i in fitting])}
    labels = []
    for i, (hours, cost, k, kind, marker) in enumerate(options):
        fits = rows[k].get("fits", True)
        ax.scatter(hours, cost, marker=marker, s=90, color=PALETTE[k % len(PALETTE)] if fits else "none",
                   edgecolors="black" if i in front else PALETTE[k % len(PALETTE)], linewidths=1.8, zorder=3)
        labels += [ax.annotate(f"{short_name(rows[k]['scenario'])}, {'rented' if kind == 'cloud' else 'owned'}"
                    + ("" if fits else f" ({NO_FIT})"), (hours, cost), textcoords="offset points", xytext=(8, 5),
                    fontsize=8)]
    if front:
        pts = sorted((options[i][0], options[i][1]) for i in front)
        xs, ys = zip(*pts)
        ax.step(xs, ys, where="post", color="black", linestyle="--", linewidth=1, zorder=2)
    cost_legend(ax, [_design_label(r) for r in rows], owned="owned (on-premises TCO)",
                front="Pareto front: nothing is both faster and cheaper" if front else None, front_line=True)
    ax.set_xlabel("time to train (hours, failures included)")
    ax.set_ylabel("cost to train (USD)")
    ax.set_title("Cost against time to train (lower left is better)")
    ax.grid(alpha=0.3)
    from_zero_with_labels(ax, labels)
    return save_figure(fig, path, tight_layout=False, whole_legend=True)


def cost_legend(ax, names: list[str], *, owned: str, front: str | None, front_line: bool = False) -> None:
    """The legend of a cost scatter (pareto.png, serving-pareto.png): a circle rented, a square
    owned, the Pareto front's outline where there is one, and one colour per design."""
    handles = [plt.Line2D([], [], marker="o", linestyle="", color="grey", label="rented (cloud)"),
               plt.Line2D([], [], marker="s", linestyle="", color="grey", label=owned)]
    if front:
        handles.append(plt.Line2D([], [], marker="o", linestyle="--" if front_line else "", color="black",
                                  markerfacecolor="white", markeredgewidth=1.8, label=front))
    handles += [plt.Line2D([], [], marker="o", linestyle="", color=PALETTE[k % len(PALETTE)],
                           label=textwrap.shorten(name, 70, placeholder="…")) for k, name in enumerate(names)]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def from_zero_with_labels(ax, labels: list) -> None:
    """Both axes from zero (distances read as ratios), room around the points, and each point's label
    inside the axes and clear of the others."""
    ax.margins(x=0.25, y=0.2)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    labels_inside(ax, labels)
    separate_labels(ax, labels)


def separate_labels(ax, labels: list) -> None:
    """Move a point's label below the labels it would cover (two designs at nearly the same point
    printed their names over each other), top to bottom; the labels stay beside their points."""
    renderer = ax.figure.canvas.get_renderer()
    placed = []
    for label in sorted(labels, key=lambda t: -t.get_window_extent(renderer).y0):
        box = label.get_window_extent(renderer)
        while any(box.overlaps(other) for other in placed):
            low = min(other.y0 for other in placed if box.overlaps(other))
            step = (box.y1 - low + 1) * 72 / ax.figure.dpi          # pixels to the points xyann is in
            label.xyann = (label.xyann[0], label.xyann[1] - step)
            box = label.get_window_extent(renderer)
        placed.append(box)


def labels_inside(ax, labels: list) -> None:
    """Widen the time axis until every point's label (right of its point) ends inside the axes, not
    under the legend: a label w pixels wide at x fits when (x - low) / (high - low) <= 1 - w / W."""
    renderer = ax.figure.canvas.get_renderer()
    width = ax.get_window_extent(renderer).width
    low, high = ax.get_xlim()
    need = high
    for label in labels:
        text = label.get_window_extent(renderer).width + label.xyann[0] * ax.figure.dpi / 72
        if text < 0.8 * width:
            need = max(need, low + (label.xy[0] - low) * width / (width - text))
    ax.set_xlim(low, need)


def breakdown_plot(rows: list[dict], path: Path) -> Path:
    """One stacked bar per design: where one optimizer step's time goes."""
    labels = _labels(rows)
    x = list(range(len(rows)))
    steps = [r["step_time_s"] for r in rows]
    scale, unit = (1e3, "ms") if max(steps) < 1 else (1.0, "s")
    fig, ax = plt.subplots(figsize=(max(6.5, 2.2 * len(rows) + 2), 4.8))
    bottom = [0.0] * len(rows)
    for key, name, colour in PARTS:
        values = [r["breakdown_s"][key] * scale for r in rows]
        ax.bar(x, values, bottom=bottom, color=colour, label=name, width=0.55)
        bottom = [b + v for b, v in zip(bottom, values)]
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:,.1f} {unit}", (i, total), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=8)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel(f"time per optimizer step ({unit})")
    ax.set_title("Where one step's time goes (slowest GPU)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.12)
    return save_figure(fig, path, tight_layout=False, whole_legend=True)


def compare_plots(rows: list[dict], directory: Path, *, budget: str = "", uncertainty: dict | None = None
                  ) -> dict[str, Path]:
    """All four comparison plots in `directory`; returns name -> path."""
    return {
        "scaling": scaling_plot(rows, directory / "scaling.png"),
        "time_cost": time_cost_plot(rows, directory / "time_cost.png", budget=budget, uncertainty=uncertainty),
        "pareto": pareto_plot(rows, directory / "pareto.png"),
        "breakdown": breakdown_plot(rows, directory / "breakdown.png"),
    }
