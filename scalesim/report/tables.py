"""Terminal tables (rich) for results and catalogs."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from scalesim.result import StepResult
from scalesim.units import format_bytes, format_time


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def result_table(r: StepResult) -> Table:
    t = Table(title=f"{r.scenario}", show_header=False, title_justify="left")
    t.add_column("metric", style="bold")
    t.add_column("value")
    t.add_row("GPUs", f"{r.gpus} x {r.gpu_name}")
    t.add_row("plan", ", ".join(f"{k}={v}" for k, v in r.plan.items()))
    fit = "yes" if r.fits else "[red]NO[/red]"
    t.add_row("memory per GPU", f"{format_bytes(r.memory_per_gpu_bytes)} of "
              f"{format_bytes(r.memory_capacity_bytes)} (fits: {fit})")
    t.add_row("  of which", ", ".join(f"{k} {format_bytes(v)}" for k, v in r.memory_breakdown.items()))
    t.add_row("step time", format_time(r.step_time_s))
    for part, seconds in r.breakdown.as_dict().items():
        t.add_row(f"  {part.replace('_', ' ')}", f"{format_time(seconds)} ({_pct(seconds / r.step_time_s)})")
    t.add_row("  communication (total, incl. hidden)", format_time(r.breakdown.total_comm))
    t.add_row("throughput", f"{r.samples_per_s:,.1f} samples/s"
              + (f", {r.tokens_per_s:,.0f} tokens/s" if r.tokens_per_s else ""))
    t.add_row("model TFLOP/s per GPU", f"{r.tflops_per_gpu:.1f} (MFU {_pct(r.mfu)})")
    t.add_row("scaling efficiency", _pct(r.scaling_efficiency))
    if r.time_to_train_s is not None:
        t.add_row("time to train", format_time(r.time_to_train_s))
    if r.cost_usd is not None:
        t.add_row("cost to train (cloud)", f"${r.cost_usd:,.0f}")
    if r.energy_kwh is not None:
        t.add_row("GPU energy", f"{r.energy_kwh:,.0f} kWh")
    if r.reason:
        t.add_row("[red]does not fit[/red]", r.reason)
    return t


def make_console(stderr: bool = False) -> Console:
    """A console for tables; when output is piped (no terminal), wide enough not to truncate."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=140)
    return console


def print_table(table: Table, console: Console | None = None) -> None:
    (console or make_console()).print(table)
