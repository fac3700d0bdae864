"""Text formatters the report tables share: money, percentages and durations, "n/a" when missing,
and which entries of a row are printed bold."""

from __future__ import annotations

import re

from scalesim.units import format_bytes, format_time, format_usd

NOT_AVAILABLE = "n/a"
NO_FIT = "does not fit"


def money(x: float | None) -> str:
    """US dollars as units.format_usd writes them; "n/a" when unknown."""
    return NOT_AVAILABLE if x is None else format_usd(x)


def unit_price(x: float | None) -> str:
    """A price per unit (GPU-hour, kWh) with the tenth of a cent it has, so that hours x price gives the
    cost the tables print ($0.375 a GPU-hour showed as $0.38: 8 x 9.65 h x $0.38 is not $28.95).

    >>> unit_price(0.375), unit_price(1.94), unit_price(3.0), unit_price(None)
    ('$0.375', '$1.94', '$3.00', 'n/a')
    """
    if x is None:
        return NOT_AVAILABLE
    text = f"{x:,.3f}"
    return "$" + (text[:-1] if text.endswith("0") else text)


# what each word of a plan label (app/plans.PlanPoint.label: "dp8 zero3 mb2 rc-full") stands for
_PLAN_WORDS = ((r"dp\d+", "dpN = N-way data parallel"), (r"tp\d+", "tpN = N-way tensor parallel"),
               (r"pp\d+", "ppN = N pipeline stages"), (r"cp\d+", "cpN = N-way context parallel"),
               (r"zero\d", "zeroN = ZeRO stage N (1: optimizer state, 2: + gradients, 3: + weights sharded over dp)"),
               (r"mb\d+", "mbN = micro-batch of N samples per GPU per forward"),
               (r"rc-.+", "rc-X = activation recompute (selective or full)"),
               (r"offload-opt", "offload-opt = optimizer state in host RAM"),
               (r"offload-weights", "offload-weights = weights in host RAM"),
               (r"q?lora", "lora / qlora = low-rank adapters (qlora: on a 4-bit base)"))


def plan_notation(plans: list[str | None]) -> str:
    """What the words of these plan labels mean, only those that occur ("" when none does).

    >>> plan_notation(["dp8 mb8", "dp8 zero1 mb2 rc-selective"])
    'Plan: dpN = N-way data parallel; zeroN = ZeRO stage N (1: optimizer state, 2: + gradients, 3: + weights sharded over dp); mbN = micro-batch of N samples per GPU per forward; rc-X = activation recompute (selective or full)'
    >>> plan_notation([None]), "offload-weights" in plan_notation(["dp1 mb4 offload-weights qlora"])
    ('', True)
    """
    words = {w for plan in plans if plan for w in plan.split()}
    used = [text for pattern, text in _PLAN_WORDS if any(re.fullmatch(pattern, w) for w in words)]
    return "Plan: " + "; ".join(used) if used else ""


MFU_MEANS = ("MFU (model FLOPs utilisation): the model's FLOP/s per GPU (forward and backward, recompute not "
             "counted) over the GPU's dense peak at the training precision")


def plan_notes(plans: list[str | None]) -> str:
    """The sentences under a table with an MFU row and these plans: what MFU and the plans' words mean."""
    words = plan_notation(plans)
    return f"{MFU_MEANS}." + (f" {words}." if words else "")


def percent(x: float | None) -> str:
    """A fraction as a percentage with one decimal (0.5 -> "50.0%"); "n/a" when unknown."""
    return NOT_AVAILABLE if x is None else f"{100 * x:.1f}%"


def scaling_text(efficiency: float | None, gpus: int, reference_fits: bool | None,
                 reference_bytes: float | None, capacity_bytes: float) -> str:
    """Scaling efficiency as the tables show it: "n/a (1 GPU)" for a run on one GPU (compared with
    itself), and marked where the 1-GPU run it is measured against could not run.

    >>> scaling_text(0.548, 8, False, 116 * 2**30, 24 * 2**30)
    '54.8% (against a 1-GPU run that would not fit: 116.0 GiB of 24.0 GiB)'
    >>> scaling_text(1.0, 1, True, 2**30, 24 * 2**30), scaling_text(0.9, 8, True, 2**30, 24 * 2**30)
    ('n/a (1 GPU)', '90.0%')
    """
    if gpus == 1:
        return f"{NOT_AVAILABLE} (1 GPU)"
    against = unrunnable_reference(reference_fits, reference_bytes, capacity_bytes)
    return percent(efficiency) + ("" if efficiency is None or against is None else f" ({against})")


def unrunnable_reference(reference_fits: bool | None, reference_bytes: float | None,
                         capacity_bytes: float) -> str | None:
    """"against a 1-GPU run that would not fit: ..." where the run scaling efficiency is measured
    against could not run (`reference_fits` False), else None."""
    if reference_fits is not False:
        return None
    if reference_bytes is not None and reference_bytes > capacity_bytes:
        return (f"against a 1-GPU run that would not fit: {format_bytes(reference_bytes)} of "
                f"{format_bytes(capacity_bytes)}")
    return "against a 1-GPU run whose offloaded state would not fit in host memory"


def scaling_texts(rows: list[dict]) -> list[str]:
    """`scaling_text` of each design row of `compare --json`'s table."""
    return [scaling_text(r["scaling_efficiency"], r["gpus"], r.get("scaling_reference_fits"),
                         r.get("scaling_reference_memory_bytes"), r["memory_capacity_bytes"]) for r in rows]


def duration(seconds: float | None) -> str:
    """Seconds as units.format_time writes them; "n/a" when unknown."""
    return NOT_AVAILABLE if seconds is None else format_time(seconds)


def bold_flags(best: list[float | None] | None, lowest: bool, count: int) -> list[bool]:
    """Which of `count` entries are the best of their row (None entries never are)."""
    if not best or all(v is None for v in best):
        return [False] * count
    pick = (min if lowest else max)(v for v in best if v is not None)
    return [v is not None and v == pick for v in best]


def unpriced_notes(rows: list[dict]) -> dict[str, str]:
    """Why a design that fits shows n/a for a cost ('no GPU price', 'no GPU-hour price'), each with
    what is missing and the scenario key that sets it."""
    fits = [r for r in rows if r["fits"]]
    return ({"no GPU price": "the catalog has no purchase price for that GPU; set pricing.ownership.gpu_usd"}
            if any(r.get("purchase_usd") is None for r in fits) else {}) | (
        {"no GPU-hour price": "the catalog has no cloud price for that GPU; set pricing.gpu_hour_usd"}
        if any("gpu_hour_usd" in r and r["gpu_hour_usd"] is None for r in fits) else {})
