"""Bounds on a catalog entry's numbers (SI, after units are read), each with the reason it exists.

A user's GPU or link (a --catalog folder, a `base:` override in a node design) may hold any
number the parser reads. A rate of 1e-300 TFLOP/s, a link of 1e-300 GB/s, an efficiency of
1e-300 or a latency of 1e300 s made a step of ~1e300 s, and the energy and cost that
multiply it overflowed to infinity, printed as `Infinity` in `run --json` (not JSON). Values
far outside any real part are refused instead, naming the entry and the field (exit 2);
anything within stays the user's what-if. The shipped catalog lies well inside every bound.
"""

from __future__ import annotations

from scalesim.limits import check_value

_RATE = (1e9, 1e18, "GPUs compute at tera- to peta-FLOP/s (a GFLOP/s is a 1990s CPU; 1e18 is 400x a B200)")
_FRACTION = (1e-3, None, "achieved fractions of a peak are measured at 0.3-1; a thousandth is no measurement")
_LATENCY = (None, 1.0, "links answer within microseconds; a second per message is no interconnect")
_PRICE = "a GPU's price is thousands to tens of thousands of dollars, an hour of it a few dollars"
CATALOG_BOUNDS: dict[str, tuple[float | None, float | None, str]] = {
    **dict.fromkeys(("fp32", "tf32", "fp16", "bf16", "fp8", "int8"), _RATE),
    "memory": (2**20, 2**50, "GPUs hold GiB to hundreds of GiB (a MiB made the headroom -Infinity in run --json)"),
    "memory_bw": (1e9, 1e15, "GPU memory moves GB/s to tens of TB/s (HBM3e: 8 TB/s)"),
    "bandwidth": (1e6, 1e15, "links move MB/s to TB/s (NVLink 5: 900 GB/s a direction)"),
    "latency": _LATENCY,
    "net_plugin_latency": _LATENCY,
    **dict.fromkeys(("gemm_efficiency", "memory_bw_efficiency", "fp8_gemm_efficiency", "fp32_gemm_efficiency",
                     "read_bw_efficiency", "training_clock_fraction", "efficiency"), _FRACTION),
    "gemm_k_overhead": (None, 1e6, "a GEMM tile's fixed cost is hundreds of reduction steps (b200: 390)"),
    "nvls_pipeline_fill": (None, 1e3, "NCCL's NVLS kernel fills its pipeline in a few loops (shipped: 2)"),
    "tdp": (None, 1e5, "a GPU draws hundreds of watts to a few kW"),
    "idle": (None, 1e5, "a GPU draws hundreds of watts to a few kW"),
    "list_price_usd": (None, 1e7, _PRICE),
    "cloud_usd_per_gpu_hour": (None, 1e3, _PRICE),
    "boost_clock_mhz": (1.0, 1e5, "GPUs clock at hundreds to a few thousand MHz"),
}


def check_plausible(field: str, value: float) -> None:
    """Raise InputError (no key: the caller names the entry and field) when a number lies outside its bound."""
    bounds = CATALOG_BOUNDS.get(field)
    if bounds is not None and value is not None:
        check_value(field, value, bounds)
