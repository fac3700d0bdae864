"""`scalesim calibrate`'s records (Check, Fit) and its GPU fits: `gemm_efficiency` (`fp8_gemm_efficiency`
for fp8 rows) from GEMM TFLOP/s and `memory_bw_efficiency` from streaming GB/s (the method is in
scalesim/app/calibrate.py's text; the link fits are there)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from scalesim.app.measurements import BandwidthPoint, GemmPoint
from scalesim.costs.compute import relative_shape_efficiency
from scalesim.costs.gemm_depth import depth_efficiency
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.hardware.plausible import CATALOG_BOUNDS


@dataclass(frozen=True, slots=True)
class Check:
    """One of the user's figures against the catalog before and after calibration."""

    what: str           # "all_gather 8 GPUs 1.0 GiB", "gemm bf16 8192x8192x8192", "memory bandwidth"
    unit: str           # "GB/s busbw", "TFLOP/s", "GB/s"
    measured: float
    before: float
    after: float
    fitted: bool        # used in the fit (bandwidth-bound sizes; every GEMM and bandwidth row)


@dataclass(frozen=True, slots=True)
class Fit:
    entry: str          # catalog name
    field: str          # efficiency, gemm_efficiency, fp8_gemm_efficiency, memory_bw_efficiency
    before: float
    after: float
    checks: tuple[Check, ...]
    note: str
    notice: str = ""    # one line for the user: why this entry was fitted and not the --link named


def fit_gemm(points: list[GemmPoint], gpu: GpuSpec, fp8: bool) -> Fit:
    field = "fp8_gemm_efficiency" if fp8 else "gemm_efficiency"
    before = gpu.gemm_efficiency_for("fp8" if fp8 else "bf16")

    def predicted(p: GemmPoint, efficiency: float) -> float:
        # the rate scalesim predicts for this GEMM: the clock it holds (training_clock_fraction) and its
        # depth (gemm_k_overhead, costs/gemm_depth.py) included
        return (gpu.peak_flop_per_s(p.precision) * efficiency * gpu.training_clock_fraction
                * relative_shape_efficiency(p.m, p.n, gpu) * depth_efficiency(p.k, gpu.gemm_k_overhead, p.precision)
                / 1e12)

    try:
        peaks = {p.precision: gpu.peak_flop_per_s(p.precision) for p in points}
    except InputError as exc:       # fp8 rows for a GPU without fp8 tensor cores
        raise InputError(f"{exc.detail}; the GEMM rows name it: is --gpu the GPU they ran on?", key="--gpu") from None
    for p in points:
        _below_peak(p.tflops, peaks[p.precision] / 1e12, "TFLOP/s", gpu,
                    f"GEMM {p.precision} {p.m}x{p.n}x{p.k}", f"dense {p.precision} peak")
    after = min(1.0, statistics.median(p.tflops / predicted(p, 1.0) for p in points))
    checks = tuple(Check(f"gemm {p.precision} {p.m}x{p.n}x{p.k}", "TFLOP/s", p.tflops, predicted(p, before),
                         predicted(p, after), True) for p in points)
    return Fit(gpu.name, field, before, round(after, 4), checks,
               f"{field} fitted by scalesim calibrate: median of measured / (dense peak x training clock x shape and "
               "depth factors)")


def _below_peak(value: float, peak: float, unit: str, gpu: GpuSpec, what: str, peak_name: str) -> None:
    """Refuse a measurement above what the GPU can do at all, or below the least achieved fraction a catalog
    entry takes (a thousandth, hardware/plausible.py; calibrate wrote an efficiency of 0.0 its folder could not
    be read with): a unit slip (GFLOP/s, MB/s; PFLOP/s, TB/s) or another GPU."""
    floor = CATALOG_BOUNDS["gemm_efficiency"][0]
    if value > peak or value < peak * floor:
        side = "above" if value > peak else f"below {floor:g} x"
        raise InputError(f"the measured {what} of {value:,.4g} {unit} is {side} {gpu.name}'s {peak_name} of "
                         f"{peak:,.1f} {unit}: values are TFLOP/s for gemm rows and GB/s for membw rows; "
                         "and --gpu names the GPU they were measured on", key="--gpu")


def fit_memory(points: list[BandwidthPoint], gpu: GpuSpec) -> Fit:
    for p in points:
        _below_peak(p.GBps, gpu.memory_bw_bytes_per_s / 1e9, "GB/s", gpu, "memory bandwidth", "datasheet bandwidth")
    before = gpu.memory_bw_efficiency
    after = min(1.0, statistics.median(p.GBps * 1e9 / gpu.memory_bw_bytes_per_s for p in points))
    bw = gpu.memory_bw_bytes_per_s / 1e9
    checks = tuple(Check("memory bandwidth", "GB/s", p.GBps, bw * before, bw * after, True) for p in points)
    return Fit(gpu.name, "memory_bw_efficiency", before, round(after, 4), checks,
               "memory_bw_efficiency fitted by scalesim calibrate: median of measured / datasheet bandwidth")
