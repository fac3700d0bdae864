"""Monte-Carlo over the uncertain inputs: P10/P50/P90 of time and cost, and who wins.

Each uncertain input is multiplied by a lognormal factor with median 1 whose
spread is given as its P90/P50 ratio `r` (so 80% of samples fall between
1/r and r), from the scenario's `uncertainty:` section:

| input | default r | why |
| --- | --- | --- |
| step time (achieved efficiencies) | 1.17 | `scalesim validate`, out of sample (5 Dec 2026, validation/uncertainty_spread.py): the 205 training-throughput cases (reference and supplementary, not disputed), each source predicted with constants fitted without it, have median absolute log error 0.038 and 90th percentile 0.155; r = e^0.155 = 1.17 puts that percentile at P90. A floor, not a promise: leaving a source out refits constants, not the mechanisms and setup facts read while its cases were studied; an independent check on held-out sources found errors about three times the in-sample ones (issue 17, when it was 1.50 from a P90 of 0.41 on 3 Dec). |
| failure rate | 3.0 | Llama 3 (1.97e-5 per GPU-hour) and OPT-175B (~1.3e-4) differ 7x; r = 3 spans both at P10-P90 |
| GPU-hour price | 1.5 | the aggregator ranges in shared/reference/hardware.yaml span about 1.5x around their midpoints (H100 SXM $1.52-4.76) |
| purchase prices (GPU, server, network) | 1.2 | street prices vs list prices; assumption |
| electricity price | 1.3 | assumption (industrial tariffs vary ~2x between regions) |

Approximation (cheap by design): the step is simulated once; a sample scales
the whole simulated step time by its efficiency factor (compute and
communication alike) instead of re-simulating, then re-evaluates the pure
cost and reliability models with its sampled prices and failure rate.

Determinism: one numpy Generator seeded from `--seed` (or the first
scenario's `uncertainty.seed`, default 0); draws happen in a fixed order, so
the same inputs and seed give the same percentiles. Design-specific factors
(step time, failure rate, GPU-hour and purchase prices) are drawn
independently per design; the electricity price is shared, as designs
compared for one site pay the same tariff.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from scalesim.costs.economics import RunInputs, training_economics

Z90 = 1.2815515655446004          # standard normal quantile at 0.9
PERCENTILES = (10, 50, 90)
DESIGN_FACTORS = ("step_time", "failure_rate", "gpu_hour_price", "purchase_price")
SHARED_FACTORS = ("electricity_price",)


@dataclass(frozen=True, slots=True)
class Spread:
    """P90/P50 ratio of each uncertain factor (1 = certain)."""

    step_time: float = 1.17
    failure_rate: float = 3.0
    gpu_hour_price: float = 1.5
    purchase_price: float = 1.2
    electricity_price: float = 1.3

    @classmethod
    def from_spec(cls, spec) -> "Spread":
        return cls(spec.step_time, spec.failure_rate, spec.gpu_hour_price, spec.purchase_price,
                   spec.electricity_price)


def lognormal_factors(rng: np.random.Generator, ratio: float, size) -> np.ndarray:
    """Factors with median 1 and P90 = ratio (P10 = 1/ratio)."""
    sigma = math.log(ratio) / Z90 if ratio > 1 else 0.0
    return np.exp(rng.normal(0.0, 1.0, size) * sigma)


def perturb(inputs: RunInputs, factors: dict[str, float]) -> RunInputs:
    """The inputs of one sample: slower or faster steps, other failure rate and prices."""
    step = factors.get("step_time", 1.0)
    prices = inputs.prices
    gpu_hour = prices.gpu_hour_usd if prices.gpu_hour_usd is not None else inputs.gpu.cloud_usd_per_gpu_hour
    purchase = factors.get("purchase_price", 1.0)
    own = inputs.ownership
    return replace(
        inputs,
        samples_per_s=inputs.samples_per_s / step,
        tokens_per_s=None if inputs.tokens_per_s is None else inputs.tokens_per_s / step,
        prices=replace(prices,
                       gpu_hour_usd=None if gpu_hour is None else gpu_hour * factors.get("gpu_hour_price", 1.0),
                       electricity_usd_per_kwh=prices.electricity_usd_per_kwh
                       * factors.get("electricity_price", 1.0)),
        ownership=replace(own, gpu_usd=None if own.gpu_usd is None else own.gpu_usd * purchase,
                          server_usd=own.server_usd * purchase, network_usd=own.network_usd * purchase),
        failures=replace(inputs.failures, failure_rate_per_gpu_hour=inputs.failures.failure_rate_per_gpu_hour
                         * factors.get("failure_rate", 1.0)),
    )


def _outcome(inputs: RunInputs) -> dict[str, float]:
    money = training_economics(inputs)
    on_prem = (money.details.get("on_prem") or {}).get("cost_usd")
    return {"time_to_train_s": money.time_to_train_s, "cost_usd": money.cost_usd,
            "on_prem_cost_usd": on_prem, "energy_kwh": money.energy_kwh}


def _percentiles(values: list[float | None]) -> dict[str, float] | None:
    finite = [v if v is not None else math.inf for v in values]
    if all(math.isinf(v) for v in finite):
        return None
    # between two samples that never finish numpy interpolates inf - inf = NaN: that percentile never finishes
    with np.errstate(invalid="ignore"):
        p = np.percentile(np.array(finite, dtype=float), PERCENTILES)
    return {f"p{k}": (None if not math.isfinite(v) else float(v)) for k, v in zip(PERCENTILES, p)}


def _wins(outcomes: list[list[dict]], metric: str, competing: list[bool] | None = None) -> list[float]:
    """Share of samples in which each design has the lowest value of `metric` (ties: the first),
    among the `competing` ones (a design that does not fit never wins: 0)."""
    designs = len(outcomes)
    samples = len(outcomes[0]) if outcomes else 0
    counts = [0] * designs
    for i in range(samples):
        values = [outcomes[j][i][metric] if competing is None or competing[j] else None for j in range(designs)]
        values = [math.inf if v is None else v for v in values]
        if all(math.isinf(v) for v in values):
            continue
        counts[values.index(min(values))] += 1
    return [c / samples if samples else 0.0 for c in counts]


def monte_carlo(inputs: list[RunInputs], spreads: list[Spread], *, samples: int, seed: int,
                competing: list[bool] | None = None) -> dict:
    """P10/P50/P90 of time, cloud and on-prem cost and energy per design, and win shares among the
    `competing` designs (those that fit; all when None).

    Returns {"samples", "seed", "designs": [{percentiles by metric}], "wins": {metric: [share per design]}}.
    """
    if samples < 1:
        raise ValueError("samples must be at least 1")
    rng = np.random.default_rng(seed)
    n = len(inputs)
    draws = {name: np.column_stack([lognormal_factors(rng, getattr(spreads[j], name), samples) for j in range(n)])
             for name in DESIGN_FACTORS}
    shared = {name: lognormal_factors(rng, getattr(spreads[0], name), samples) for name in SHARED_FACTORS}
    outcomes = [[_outcome(perturb(inputs[j], {**{k: float(v[i, j]) for k, v in draws.items()},
                                              **{k: float(v[i]) for k, v in shared.items()}}))
                 for i in range(samples)] for j in range(n)]
    metrics = ("time_to_train_s", "cost_usd", "on_prem_cost_usd", "energy_kwh")
    designs = [{m: _percentiles([o[m] for o in outcomes[j]]) for m in metrics} for j in range(n)]
    wins = {m: _wins(outcomes, m, competing) for m in ("time_to_train_s", "cost_usd", "on_prem_cost_usd")}
    return {"samples": samples, "seed": seed, "designs": designs, "wins": wins,
            "spreads": [vars_of(s) for s in spreads]}


def vars_of(spread: Spread) -> dict[str, float]:
    return {name: getattr(spread, name) for name in Spread.__slots__}


def step_uncertainty(result, spec, samples: int, seed: int | None) -> dict:
    """`run --samples`: the Monte-Carlo of one simulated step, with the scenario's spreads (`spec`)."""
    mc = monte_carlo([result.inputs], [Spread.from_spec(spec)], samples=samples,
                     seed=spec.seed if seed is None else seed)
    return {"samples": mc["samples"], "seed": mc["seed"], "spreads": mc["spreads"][0], **mc["designs"][0]}
