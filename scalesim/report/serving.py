"""Serving reports: the terminal table and plots of `scalesim serve`, from its JSON object.

Reads the result dictionary only (never simulates). Plots: the
latency-throughput curve (P50/P99 end-to-end latency against output
tokens/s over the rates simulated) and TTFT/TPOT percentiles against rate,
each with the SLO drawn in.
"""

from __future__ import annotations

from pathlib import Path

from scalesim.report import figures  # noqa: F401 (first: it makes matplotlib's import cheaper)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from scalesim.report.figures import plain_log_axis, save_figure  # noqa: E402
from scalesim.units import format_bytes, format_time  # noqa: E402


def _pcts(values: dict | None) -> str:
    if not values:
        return "n/a"
    return " / ".join(format_time(values[k]) for k in ("p50", "p90", "p99"))


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.3f}"


def serving_table(r: dict) -> Table:
    t = Table(title=escape(r["scenario"]), show_header=False, title_justify="left")
    t.add_column("metric", style="bold")
    t.add_column("value")
    plan = r["plan"]
    t.add_row("GPUs", f"{r['gpus']} x {r['gpu']} as {r['replicas']} replica(s) of tp={plan['tp']} pp={plan['pp']}")
    t.add_row("plan", ", ".join(f"{k}={v}" for k, v in plan.items() if k not in ("tp", "pp", "ep")))
    memory = r["memory_breakdown_bytes"]
    fit = "yes" if r["fits"] else "[red]NO[/red]"
    t.add_row("memory per GPU", ", ".join(f"{k} {format_bytes(v)}" for k, v in memory.items())
              + f" of {format_bytes(r['memory_capacity_bytes'])} (fits: {fit})")
    t.add_row("KV cache", f"{r['kv_cache_tokens']:,} tokens per replica"
              + ("" if r.get("kv_cache_peak_fraction") is None else f", peak use {r['kv_cache_peak_fraction']:.0%}"))
    if not r["fits"]:
        t.add_row("does not fit", f"[red]{r['reason']}[/red]")
        return t
    load = (f"{r['rate_per_s']:g} requests/s (Poisson)" if r.get("concurrency") is None
            else f"{r['concurrency']} concurrent clients (closed loop)")
    t.add_row("load", f"{load}, {r['requests']:,} requests")
    single = r.get("single_request") or {}
    if single:
        t.add_row("alone on a replica", f"prefill of {single['prompt_tokens']:,} tokens "
                  f"{format_time(single['prefill_s'])}, one decode step {format_time(single['decode_step_s'])}")
    t.add_row("TTFT P50 / P90 / P99", _pcts(r["ttft_s"]) + " (time to first token)")
    t.add_row("TPOT P50 / P90 / P99", _pcts(r["tpot_s"]) + " (time per output token after the first)")
    t.add_row("end-to-end P50 / P90 / P99", _pcts(r["e2e_latency_s"]))
    t.add_row("throughput", f"{r['output_tokens_per_s']:,.0f} output tokens/s, {r['requests_per_s']:,.2f} requests/s")
    t.add_row("preemptions", f"{r['preemptions']:,}")
    slo = r["slo"]
    best = r.get("max_rate_under_slo")
    t.add_row("SLO (P99)", f"TTFT <= {format_time(slo['ttft_s'])}, TPOT <= {format_time(slo['tpot_s'])}: "
              + ("met" if r.get("meets_slo") else "[red]missed[/red]") + " at this load")
    t.add_row("max rate under SLO", "not searched" if best is None and not r.get("sweep")
              else ("none of the rates" if best is None else f"{best:,.2f} requests/s"))
    cost = r.get("cost_per_million_tokens_usd") or {}
    hours = r.get("gpu_hours_per_million_tokens")
    served = (r.get("output_tokens_per_s") or 0) > 0          # a price is missing, not the throughput
    cloud = _usd(cost.get("cloud")) + (" (no GPU-hour price: set pricing.gpu_hour_usd)"
                                       if cost.get("cloud") is None and served else "")
    owned = _usd(cost.get("owned")) + (" (no GPU price: set pricing.ownership.gpu_usd)"
                                       if cost.get("owned") is None and served else "")
    t.add_row("cost per million output tokens", f"cloud {cloud}, owned {owned}"
              + ("" if hours is None else f" ({hours:,.3f} GPU-hours)"))
    energy = r.get("energy_kwh_per_million_tokens")
    if energy:
        t.add_row("energy per million output tokens", f"{energy['it']:,.2f} kWh (GPUs and hosts; "
                  f"{energy['facility']:,.2f} with PUE)")
    return t


def runs_by_requests(points: list[dict]) -> list[tuple[int, list[dict]]]:
    """The sweep's rows grouped by how many requests each simulated, the most first: the search
    probes rates on the first requests only, and a probe's latency and throughput do not continue
    the curve of the full load's runs."""
    counts = sorted({p.get("requests", 0) for p in points}, reverse=True)
    return [(n, [p for p in points if p.get("requests", 0) == n]) for n in counts]


RATE_COLUMNS = ("rate/s: requests offered per second (Poisson arrivals), --rates' or the search's; TTFT: time "
                "to first token; TPOT: time per output token after the first; e2e: end-to-end latency; "
                "tokens/s: output tokens; KV peak: the KV cache's peak use; preempt: sequences evicted when the "
                "KV cache was full (they recompute their tokens later); $/M cloud: cloud cost per million output "
                "tokens.")


def sweep_table(r: dict) -> Table:
    points = r.get("sweep", [])
    mixed = len(runs_by_requests(points)) > 1
    t = Table(title="rates simulated", title_justify="left", caption_justify="left",
              caption=RATE_COLUMNS + (f" requests: rows with fewer than the scenario's "
                                      f"{max(p['requests'] for p in points):,} are the rate search's probes on the "
                                      "first requests only; compare rows of the same count." if mixed else ""))
    for column in ("rate/s", *(("requests",) if mixed else ()), "TTFT P99", "TPOT P99", "e2e P50", "tokens/s",
                   "KV peak", "preempt", "SLO", "$/M cloud"):
        t.add_column(column, justify="right")
    for p in points:
        t.add_row(f"{p['rate_per_s']:.3g}", *((f"{p['requests']:,}",) if mixed else ()),
                  format_time(p["ttft_s"]["p99"]) if p["ttft_s"] else "n/a",
                  format_time(p["tpot_s"]["p99"]) if p["tpot_s"] else "n/a",
                  format_time(p["e2e_latency_s"]["p50"]) if p["e2e_latency_s"] else "n/a",
                  f"{p['output_tokens_per_s']:,.0f}", f"{p['kv_cache_peak_fraction']:.0%}", f"{p['preemptions']:,}",
                  "met" if p["meets_slo"] else "missed", _usd(p["cost_per_million_tokens_usd"]["cloud"]))
    return t


def latency_throughput_plot(results: list[dict], path: Path) -> Path:
    """End-to-end latency (P50 solid, P99 dashed) against output tokens/s, one line per design."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = []
    for r in results:
        groups = runs_by_requests([p for p in r.get("sweep", []) if p["e2e_latency_s"]])
        colour = None
        for k, (count, points) in enumerate(groups):
            x = [p["output_tokens_per_s"] for p in points]
            probe = k > 0          # the search's probes on the first requests: hollow, not joined
            style = dict(ls="none", mfc="none") if probe else {}
            line, = ax.plot(x, [p["e2e_latency_s"]["p50"] for p in points], marker="o", **({"ls": "-"} | style),
                            color=colour,
                            label=f"hollow: search probes, first {count:,} requests" if probe
                            else f"{r['scenario']} P50")
            colour = line.get_color()
            ax.plot(x, [p["e2e_latency_s"]["p99"] for p in points], marker="s", **({"ls": "--"} | style),
                    color=colour, label=None if probe else "P99")
            plotted += [p["e2e_latency_s"][q] for p in points for q in ("p50", "p99")]
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis, plotted)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("latency against throughput (each point a request rate)")
    return save_figure(fig, path)


def percentiles_plot(r: dict, path: Path) -> Path:
    """TTFT and TPOT at P50/P90/P99 against request rate, with the SLO."""
    groups = runs_by_requests([p for p in r.get("sweep", []) if p["ttft_s"]])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "ttft_s", "time to first token, TTFT"),
                           (axes[1], "tpot_s", "time per output token, TPOT")):
        slo = r["slo"][key]
        values = [p[key][q] for _, points in groups for p in points if p[key] for q in ("p50", "p99")] + [slo]
        scale, unit = (1e3, "ms") if max(values) < 1 else (1.0, "s")     # as the table prints them
        for q, style in (("p50", "o-"), ("p90", "s--"), ("p99", "^:")):
            colour = None
            for k, (count, points) in enumerate(groups):
                probe = k > 0      # the search's probes on the first requests: hollow, not joined
                line, = ax.plot([p["rate_per_s"] for p in points if p[key]],
                                [p[key][q] * scale for p in points if p[key]], marker=style[0], color=colour,
                                label=(f"hollow: search probes, first {count:,} requests" if q == "p50"
                                       else None) if probe else q.upper(),
                                **(dict(ls="none", mfc="none") if probe else {"ls": style[1:]}))
                colour = line.get_color()
        ax.axhline(slo * scale, color="#C44E52", lw=1,
                   label=f"SLO ({slo * 1e3:g} ms)" if slo < 1 else f"SLO ({slo:g} s)")
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(f"{label} ({unit})")
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis, [v * scale for v in values])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{r['scenario']}: latency percentiles against rate")
    return save_figure(fig, path)


def serving_compare_table(rows: list[dict]) -> Table:
    """Serving designs side by side at each one's highest rate under the SLO."""
    t = Table(title="serving comparison (each design at its highest request rate meeting the SLO)",
              title_justify="left", caption_justify="left",
              caption="TTFT: time to first token; TPOT: time per output token after the first; SLO: the "
                      "latency target (serving.slo); $ per M tokens: per million output tokens.")
    t.add_column("metric", style="bold", no_wrap=True)
    for r in rows:
        t.add_column(escape(r["scenario"]), justify="right", overflow="fold", ratio=1)

    def line(label: str, key: str, fmt) -> None:
        t.add_row(label, *("n/a" if r.get(key) is None else fmt(r[key]) for r in rows))

    t.add_row("GPUs", *(f"{r['gpus']} x {r['gpu']}" for r in rows))
    t.add_row("plan", *(f"tp={r['plan']['tp']} pp={r['plan']['pp']} {r['plan']['weights']}" for r in rows))
    t.add_row("fits", *("yes" if r["fits"] else "[red]NO[/red]" for r in rows))
    line("max rate under SLO", "max_rate_under_slo", lambda v: f"{v:,.2f} req/s")
    line("output tokens/s there", "output_tokens_per_s", lambda v: f"{v:,.0f}")
    line("TTFT P99", "ttft_p99_s", format_time)
    line("TPOT P99", "tpot_p99_s", format_time)
    line("end-to-end P50", "e2e_p50_s", format_time)
    line("cloud $ per M tokens", "usd_per_million_tokens", _usd)
    line("owned $ per M tokens", "owned_usd_per_million_tokens", _usd)
    return t


def serving_pareto_plot(rows: list[dict], front: list[dict], path: Path) -> Path:
    """Cost per million output tokens against median latency at each design's best rate: one colour
    per design, a circle rented and a square owned, the Pareto front outlined (as compare's pareto.png)."""
    from scalesim.report.comparison import PALETTE, cost_legend, from_zero_with_labels, short_name

    fig, ax = plt.subplots(figsize=(10, 5.2))
    on_front = {(p["scenario"], p["kind"]) for p in front}
    labels = []
    for k, r in enumerate(rows):
        colour = PALETTE[k % len(PALETTE)]
        for kind, key, marker in (("cloud", "usd_per_million_tokens", "o"),
                                  ("owned", "owned_usd_per_million_tokens", "s")):
            if r["e2e_p50_s"] is None or r[key] is None:
                continue
            best = (r["scenario"], kind) in on_front
            ax.scatter(r["e2e_p50_s"], r[key], marker=marker, s=90, color=colour,
                       edgecolors="black" if best else colour, linewidths=1.8, zorder=3)
            labels.append(ax.annotate(f"{short_name(r['scenario'])}, {'rented' if kind == 'cloud' else 'owned'}",
                                      (r["e2e_p50_s"], r[key]), fontsize=8, xytext=(8, 5), textcoords="offset points"))
    cost_legend(ax, [r["scenario"] for r in rows], owned="owned (on-premises)",
                front="Pareto front: nothing is both cheaper and faster" if front else None)
    ax.set_xlabel("end-to-end latency P50 at the highest rate under the SLO (s)")
    ax.set_ylabel("USD per million output tokens")
    ax.grid(True, alpha=0.3)
    ax.set_title("Cost against latency (lower left is better)")
    from_zero_with_labels(ax, labels)
    return save_figure(fig, path, tight_layout=False, whole_legend=True)
