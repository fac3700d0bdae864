"""Time, money and energy of a whole training run, from the simulated step.

Pure functions of the step's throughput and utilisation and the scenario's
budget and prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalesim.hardware import GpuSpec

SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True, slots=True)
class Budget:
    """What the run must process: tokens, or epochs over a dataset of samples."""

    tokens: float | None = None
    epochs: float | None = None
    dataset_samples: int | None = None


@dataclass(frozen=True, slots=True)
class Prices:
    gpu_hour_usd: float | None = None          # None: the catalog's typical cloud price
    electricity_usd_per_kwh: float = 0.15


@dataclass(frozen=True, slots=True)
class Economics:
    time_to_train_s: float | None
    cost_usd: float | None
    energy_kwh: float | None
    details: dict = field(default_factory=dict)


def time_to_train_s(budget: Budget, samples_per_s: float, tokens_per_s: float | None) -> float | None:
    """Seconds to process the budget at the simulated throughput (None without a budget)."""
    if budget.tokens is not None and tokens_per_s:
        return budget.tokens / tokens_per_s
    if budget.epochs is not None and budget.dataset_samples is not None:
        return budget.epochs * budget.dataset_samples / samples_per_s
    return None


def gpu_power_w(gpu: GpuSpec, busy_fraction: float) -> float:
    """Average draw of one GPU: idle power plus the busy share of the rest of its TDP."""
    return gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * min(max(busy_fraction, 0.0), 1.0)


def training_economics(*, gpu: GpuSpec, gpus: int, samples_per_s: float, tokens_per_s: float | None,
                       busy_fraction: float, budget: Budget, prices: Prices) -> Economics:
    """Time to train, cloud cost and GPU energy for the budget."""
    seconds = time_to_train_s(budget, samples_per_s, tokens_per_s)
    if seconds is None:
        return Economics(None, None, None)
    gpu_hour = prices.gpu_hour_usd if prices.gpu_hour_usd is not None else gpu.cloud_usd_per_gpu_hour
    cost = seconds / SECONDS_PER_HOUR * gpus * gpu_hour if gpu_hour is not None else None
    energy = gpu_power_w(gpu, busy_fraction) * gpus * seconds / JOULES_PER_KWH
    return Economics(seconds, cost, energy, {"gpu_hour_usd": gpu_hour})
