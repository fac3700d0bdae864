"""Terminal tables (rich) for results and catalogs."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scalesim.result import StepResult
from scalesim.report.formatting import percent, scaling_text, unit_price
from scalesim.report.host_note import host_bound_note
from scalesim.units import format_bytes, format_time, format_usd


def result_table(r: StepResult) -> Table:
    """`scalesim run`'s table: the step (memory, time and where it goes, throughput), then the run
    (time, failures, cost and energy to train) when the plan fits."""
    t = Table(title=escape(r.scenario), show_header=False, title_justify="left")
    t.add_column("metric", style="bold")
    t.add_column("value")
    _step_rows(t, r)
    if not r.fits:
        t.add_row("time and cost to train", "[red]none: the plan does not fit[/red], so it cannot run at any "
                  "cost (run --json keeps the figures, with fits: false)")
        if r.reason:
            t.add_row("[red]does not fit[/red]", r.reason)
        return t
    _training_rows(t, r)
    if r.reason:
        t.add_row("[red]does not fit[/red]", r.reason)
    return t


def framework_defaults_text(applied: dict) -> str:
    """The keys training.framework set, as YAML writes them; none when the scenario writes them all or its
    framework's rows apply only to other plans (llm-foundry's FSDP keys at zero 0-2)."""
    return (", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in applied.items())
            or "none (the scenario writes the keys its framework would set, or they do not apply to this plan)")


def _step_rows(t: Table, r: StepResult) -> None:
    t.add_row("GPUs", f"{r.gpus} x {r.gpu_name}")
    t.add_row("plan", ", ".join(f"{k}={v}" for k, v in r.plan.items() if k != "framework_defaults"))
    if "framework" in r.plan:       # training.framework (scalesim/scenario/frameworks.py)
        t.add_row("  framework defaults", framework_defaults_text(r.plan.get("framework_defaults") or {}))
    fit = "yes" if r.fits else "[red]NO[/red]"
    if r.fit_confidence == "tight":
        fit += " [yellow](tight: within the memory model's error of the capacity; a real run could go either way)[/yellow]"
    t.add_row("memory per GPU", f"{format_bytes(r.memory_per_gpu_bytes)} of "
              f"{format_bytes(r.memory_capacity_bytes)} (fits: {fit})")
    t.add_row("  of which", memory_parts(r.memory_breakdown))
    t.add_row("step time" if r.fits else "step time (if it fitted)", format_time(r.step_time_s))
    for part, seconds in r.breakdown.as_dict().items():
        t.add_row(f"  {part.replace('_', ' ')}", f"{format_time(seconds)} ({percent(seconds / r.step_time_s)})")
    if r.breakdown.host_bound > 0:
        t.add_row("    of which host-bound", f"{format_time(r.breakdown.host_bound)} ({host_bound_note(r)})")
    t.add_row("  communication (total, incl. hidden)", format_time(r.breakdown.total_comm))
    if r.breakdown.compute_slowed_by_comm > 0:
        t.add_row("  GPU work slowed by overlap", format_time(r.breakdown.compute_slowed_by_comm)
                  + " (NCCL kernels hold SMs while hidden communication runs; included above)")
    t.add_row("throughput", f"{r.samples_per_s:,.1f} samples/s"
              + (f", {r.tokens_per_s:,.0f} tokens/s" if r.tokens_per_s else ""))
    t.add_row("model TFLOP/s per GPU", f"{r.tflops_per_gpu:.1f} (MFU {percent(r.mfu)})"
              + ("; counted as 6 x parameters per token, where adapters without weight gradients run about 4 x: "
                 "compare fine-tuning runs by tokens/s" if (r.plan or {}).get("trainable_params") is not None else ""))
    t.add_row("scaling efficiency", scaling_text(r.scaling_efficiency, r.gpus, r.scaling_reference_fits,
                                                 r.scaling_reference_memory_bytes, r.memory_capacity_bytes)
              + _above_linear_note(r))
    for point in r.scaling_skipped:       # left out by the command's answer budget (scalesim/limits.py)
        t.add_row(f"  {point['gpus']:,} GPU{'s' if point['gpus'] > 1 else ''} (scaling point)",
                  f"not simulated: {point['reason']}")
    if r.slowest_gpu_factor > 1.0:
        t.add_row("  GPU speed spread", f"GPU work {r.slowest_gpu_factor - 1:.1%} slower than on a median GPU "
                  f"(the slowest of {r.gpus:,} sets the pace; cluster.gpu_speed_spread)")


def _training_rows(t: Table, r: StepResult) -> None:
    rel = r.reliability or {}
    if r.time_to_train_s is not None:
        t.add_row("time to train", f"{format_time(r.time_to_train_s)} (failures included; "
                  f"{format_time(rel.get('ideal_time_s') or r.time_to_train_s)} without)")
    elif not (r.economics or {}).get("ideal_time_s"):
        price = (r.economics or {}).get("gpu_hour_usd")
        t.add_row("time, cost and energy to train", "not computed: the scenario gives no budget; set "
                  "training.tokens (or training.epochs and training.dataset_samples)"
                  + ("" if price is None else f" (renting the {r.gpus:,} GPUs costs {_usd(r.gpus * price)} an hour)"))
    if rel:
        mtbf, interval = rel.get("mtbf_s"), rel.get("checkpoint_interval_s")
        interruptions = rel.get("expected_interruptions")
        t.add_row("  failures", f"goodput {percent(rel.get('goodput'))}, job MTBF "
                  f"{'none (no failures)' if mtbf is None else format_time(mtbf)}"
                  + ("" if interruptions is None else f", {interruptions:,.2f} expected interruptions")
                  + (", one checkpoint at the end" if interval is None else f", checkpoint every {format_time(interval)}")
                  + f" ({format_time(rel['checkpoint_write_s'])} to write)")
    cloud = (r.economics or {}).get("cloud") or {}
    if r.cost_usd is not None:
        per_m = cloud.get("usd_per_million_tokens")
        t.add_row("cost to train (cloud)", f"{_usd(r.cost_usd)} at {unit_price(cloud.get('gpu_hour_usd', 0))}/GPU-hour"
                  + (f" ({_usd(per_m)} per million tokens)" if per_m is not None else ""))
    elif r.time_to_train_s is not None and cloud.get("gpu_hour_usd", 0) is None:
        t.add_row("cost to train (cloud)", f"n/a: the catalog has no cloud price for {r.gpu_name}; set "
                  f"pricing.gpu_hour_usd")
    own = (r.economics or {}).get("on_prem") or {}
    if own.get("cost_usd") is not None:
        per_m = own.get("usd_per_million_tokens")
        t.add_row("cost to train (owned)", f"{_usd(own['cost_usd'])}: {_usd(own['amortised_usd'])} of a "
                  f"{_usd(own['capex_total_usd'])} purchase over {own['amortisation_years']:g} years + "
                  f"{_usd(own['power_usd'])} power" + (f" ({_usd(per_m)} per million tokens)" if per_m else "")
                  + _share_note(r.economics))
    elif own.get("capex_usd", 0) is None and r.time_to_train_s is not None:
        t.add_row("cost to train (owned)", f"n/a: the catalog has no purchase price for {r.gpu_name}; set "
                  f"pricing.ownership.gpu_usd (power alone: {_usd(own.get('power_usd'))})")
    if r.energy_kwh is not None:
        energy = (r.economics or {}).get("energy_kwh") or {}
        t.add_row("energy", f"{r.energy_kwh:,.1f} kWh (GPUs {energy.get('gpu', 0):,.1f}, hosts "
                  f"{energy.get('host', 0):,.1f}; {energy.get('facility', 0):,.1f} with PUE)")


def _share_note(economics: dict) -> str:
    """How a run on part of a node is charged for the node (economics.cost_basis, app/procurement.py)."""
    if economics.get("cost_basis") != "per_gpu_share":
        return ""
    return (f"; server, network and host power of {economics['nodes_charged']:.3g} nodes, the run's share of "
            "its GPUs' nodes (cost_basis: per_gpu_share)")


def _usd(x: float | None) -> str:
    if x is None:
        return "n/a"
    return format_usd(x) if abs(x) >= 0.01 else f"${x:.2g}"


def uncertainty_table(u: dict) -> Table:
    """P10/P50/P90 of time and cost from `scalesim run --samples N`."""
    t = Table(title=f"uncertainty ({u['samples']} samples, seed {u['seed']})", title_justify="left",
              caption="step time scaled by sampled efficiency; failure rate and prices perturbed",
              caption_justify="left")
    for col in ("", "P10", "P50", "P90"):
        t.add_column(col, justify="left" if not col else "right")
    for key, name, fmt in (("time_to_train_s", "time to train", format_time), ("cost_usd", "cost (cloud)", _usd),
                           ("on_prem_cost_usd", "cost (owned)", _usd),
                           ("energy_kwh", "energy (kWh)", lambda v: f"{v:,.1f}")):
        p = u.get(key)
        if p:
            t.add_row(name, *("n/a" if p[k] is None else fmt(p[k]) for k in ("p10", "p50", "p90")))
    if not t.row_count:
        t.add_row("no training budget (tokens, or epochs + dataset_samples): nothing to sample", "", "", "")
    return t


def make_console(stderr: bool = False) -> Console:
    """A console for tables; when output is piped (no terminal), wide enough not to truncate."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=140)
    return console


def print_table(table: Table, console: Console | None = None) -> None:
    (console or make_console()).print(table)


# the breakdown's keys (costs/memory.MemoryBreakdown.as_dict) as the table says them
MEMORY_PART_NAMES = {"grad_buckets": "gradient buckets",
                     "overhead": "overhead (CUDA context, library and NCCL buffers; fragmentation)"}


def memory_parts(breakdown: dict[str, float]) -> str:
    """'weights 1.3 GiB, ..., overhead (CUDA context, ...) 1.8 GiB': the parts that take memory, in words (not
    grad_buckets 0 B and an unexplained overhead).

    >>> memory_parts({"weights": 2 ** 30, "grad_buckets": 0.0, "overhead": 2 ** 29})
    'weights 1.0 GiB, overhead (CUDA context, library and NCCL buffers; fragmentation) 512.0 MiB'
    """
    return ", ".join(f"{MEMORY_PART_NAMES.get(k, k.replace('_', ' '))} {format_bytes(v)}"
                     for k, v in breakdown.items() if v > 0)


def _above_linear_note(r) -> str:
    """Why a plan can beat N x one GPU: say it where the number is, not in the docs."""
    if r.scaling_efficiency is None or r.scaling_efficiency <= 1.0:
        return ""
    if (r.plan.get("zero") or 0) > 0:
        return " (above 100%: ZeRO gives each GPU 1/N of the optimizer update; one GPU does all of it)"
    return " (above 100%: each GPU does less per sample than one GPU alone)"
