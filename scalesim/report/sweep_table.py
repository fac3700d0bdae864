"""Sweep results: the best plan per GPU count as a table and a plot.

Reads the JSON-able sweep object of `scalesim.app.sweep.run_sweep`; never simulates.
"""

from __future__ import annotations

from pathlib import Path

from scalesim.report import figures  # noqa: F401 (first: it makes matplotlib's import cheaper)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from scalesim.report.figures import plain_log_axis, save_figure  # noqa: E402
from scalesim.report.formatting import duration, money, percent, plan_notes  # noqa: E402
from scalesim.units import format_bytes  # noqa: E402


def sweep_table(sweep: dict) -> Table:
    """Best plan per GPU count, with how many plans were simulated, pruned, too big or unavailable."""
    budgeted = [b for b in sweep["best"] if b.get("status") == "ok" and b.get("time_to_train_s") is not None]
    notes = ([] if all(b.get("on_prem_cost_usd") is not None for b in budgeted) else
             ["on-prem cost n/a: the catalog has no purchase price for this GPU; set pricing.ownership.gpu_usd"]) + (
        [] if all(b.get("cost_usd") is not None for b in budgeted) else
        ["cloud cost n/a: the catalog has no cloud price for this GPU; set pricing.gpu_hour_usd"])
    notes += [plan_notes([b.get("plan") for b in sweep["best"]])[:-1]] + (
        ["Dominated: fits but not simulated, as a lighter plan that fits (lower ZeRO stage, lighter recompute, "
         "less offload, larger micro-batch) or the best one simulated should beat it (--exhaustive simulates them)"]
        if any(s.get("dominated") for s in sweep["summary"].values()) else [])
    t = Table(title=f"{escape(sweep['scenario'])}: best plan per GPU count (ranked by {sweep['rank_by']})",
              title_justify="left", caption_justify="left", caption=". ".join(notes) + ".")
    for col in ("GPUs", "nodes", "best plan", "memory / GPU", "step time", "tokens/s per GPU", "MFU",
                "time to train", "cloud cost", "on-prem cost", "plans: simulated / dominated / too big / n.a."):
        t.add_column(col, justify="left" if col in ("best plan",) else "right", overflow="fold")
    for best in sweep["best"]:
        g = best["gpus"]
        s = sweep["summary"][g] if g in sweep["summary"] else sweep["summary"][str(g)]
        counts = f"{s['ok']} / {s['dominated']} / {s['does_not_fit']} / {s['not_available']}"
        if s.get("failed"):
            counts += f" ([red]{s['failed']} failed[/red])"
        if best.get("status") != "ok":
            t.add_row(str(g), str(best.get("nodes", "")), f"[red]none[/red]: {best.get('reason') or ''}", "", "", "", "", "", "", "", counts)
            continue
        per_gpu = best.get("tokens_per_s_per_gpu")
        t.add_row(str(g), str(best["nodes"]), best["plan"], format_bytes(best["memory_per_gpu_bytes"]),
                  duration(best["step_time_s"]), "n/a" if per_gpu is None else f"{per_gpu:,.0f}", percent(best["mfu"]),
                  duration(best["time_to_train_s"]), money(best["cost_usd"]), money(best["on_prem_cost_usd"]),
                  counts)
    return t


def _nothing_fits(fig, axes, subtitle: str) -> None:
    """No GPU count has a plan that runs and fits: say so in each panel, no axes with made-up ticks."""
    for ax, title in zip(axes, ("Throughput per GPU", "Time to train", "Cost to train")):
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no plan runs and fits\n(the table gives the reason)", ha="center", va="center",
                transform=ax.transAxes, color="#C44E52")
    fig.suptitle(subtitle, fontsize=11)


def _log_time_axis(times: list[float]) -> bool:
    """Time falls roughly as 1/GPUs: a log axis keeps every point readable once it spans a decade; within
    one, a log axis cut to the data drew 9.6 h against 10.9 h as the panel's whole height."""
    return bool(times) and max(times) >= 10 * min(times)


def best_plan_plot(sweep: dict, path: Path) -> Path:
    """Per-GPU throughput, time to train and cost of the best plan at each GPU count, plans annotated."""
    best = [b for b in sweep["best"] if b.get("status") == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    missing = [str(b["gpus"]) for b in sweep["best"] if b.get("status") != "ok"]
    xs = [b["gpus"] for b in best]
    per_gpu = [b["tokens_per_s_per_gpu"] if b["tokens_per_s_per_gpu"] is not None else b["samples_per_s"] / b["gpus"]
               for b in best]
    unit = "tokens/s" if best and best[0]["tokens_per_s_per_gpu"] is not None else "samples/s"
    subtitle = (f"{sweep['scenario']}: best fitting plan per GPU count, ranked by {sweep['rank_by']}"
                if sweep.get("search") else f"{sweep['scenario']}: the scenario's own plan at each GPU count")
    if missing:
        subtitle += f" (no plan runs and fits at {', '.join(missing)} GPUs)"
    if not best:
        _nothing_fits(fig, axes, subtitle)
        return save_figure(fig, path, whole_legend=True)
    times = [b["time_to_train_s"] for b in best if b["time_to_train_s"] is not None]
    # the unit the table gives them in: hours below a day (format_time), days beyond
    (scale, span), log_time = (3600, "hours") if times and max(times) < 86400 else (86400, "days"), _log_time_axis(times)
    panels = [
        (axes[0], per_gpu, f"{unit} per GPU", "Throughput per GPU"),
        (axes[1], [None if b["time_to_train_s"] is None else b["time_to_train_s"] / scale for b in best],
         f"time to train ({span}, failures included{'; log scale' if log_time else ''})", "Time to train"),
        (axes[2], [b["cost_usd"] for b in best], "cost to train (USD)", "Cost to train"),
    ]
    for ax, ys, ylabel, title in panels:
        pts = [(x, y, b) for x, y, b in zip(xs, ys, best) if y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color="#4C72B0",
                    label="cloud" if ax is axes[2] else None)
            if ax is axes[0]:      # the same plans in every panel: name them once
                for i, (x, y, b) in enumerate(pts):
                    last = len(pts) > 1 and i == len(pts) - 1    # under the line, ending at its point: in the panel
                    ax.annotate(b["plan"], (x, y), textcoords="offset points", xytext=(-4, -8) if last else (4, 6),
                                fontsize=7, rotation=20, ha="right" if last else "left",
                                va="top" if last else "baseline", rotation_mode="anchor")
        if ax is axes[2]:
            own = [(x, b["on_prem_cost_usd"]) for x, b in zip(xs, best) if b["on_prem_cost_usd"] is not None]
            if own:
                ax.plot(*zip(*own), marker="s", linestyle="--", color="#55A868", label="on-premises")
            ax.legend(fontsize=8)
        if ax is axes[1] and log_time:
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis, ys)        # 0.3, 1, 20: not 3x10^-1
        if ax is axes[2]:
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: money(v) if v else "$0"))
        if xs:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.margins(x=0.15, y=0.2)
        if ax is not axes[1] or not log_time:
            ax.set_ylim(bottom=0)        # linear panels from zero: heights read as ratios
        if ax is axes[0] and pts:
            ax.set_ylim(top=1.3 * max(p[1] for p in pts))     # room for the plan labels under the title
    fig.suptitle(subtitle, fontsize=11)
    return save_figure(fig, path, whole_legend=True)
