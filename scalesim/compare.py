"""Run several designs and assemble their comparison (what `scalesim compare` prints).

Each scenario is simulated as `scalesim run` does (with its scaling curve);
the rows hold what the table and plots need, and `designs` the full
`run --json` object of each, so scripts get all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scalesim.hardware.user_catalog import Catalog
from scalesim.report.compare import pareto_front
from scalesim.result import StepResult
from scalesim.runner import prepare, run
from scalesim.scenario import Scenario, load_scenario


@dataclass
class Comparison:
    files: list[str]
    scenarios: list[Scenario]
    results: list[StepResult]
    uncertainty: dict | None = None
    plots: dict[str, str] = field(default_factory=dict)

    def rows(self) -> list[dict]:
        out = []
        for file, r in zip(self.files, self.results):
            on_prem = (r.economics.get("on_prem") or {}) if r.economics else {}
            cloud = (r.economics.get("cloud") or {}) if r.economics else {}
            out.append({
                "file": file, "scenario": r.scenario, "gpus": r.gpus, "gpu": r.gpu_name, "fits": r.fits,
                "memory_per_gpu_bytes": r.memory_per_gpu_bytes, "memory_capacity_bytes": r.memory_capacity_bytes,
                "step_time_s": r.step_time_s, "breakdown_s": r.breakdown.to_json(),
                "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
                "scaling_efficiency": r.scaling_efficiency, "time_to_train_s": r.time_to_train_s,
                "cost_usd": r.cost_usd, "on_prem_cost_usd": on_prem.get("cost_usd"),
                "usd_per_million_tokens": cloud.get("usd_per_million_tokens"),
                "on_prem_usd_per_million_tokens": on_prem.get("usd_per_million_tokens"),
                "energy_kwh": r.energy_kwh, "goodput": (r.reliability or {}).get("goodput"),
                "scaling": r.scaling,
            })
        return out

    def pareto(self) -> list[dict]:
        """The (design, cloud | on-prem) options on the cost-time Pareto front."""
        options = [(r["time_to_train_s"], r[key], r["scenario"], kind)
                   for r in self.rows() for kind, key in (("cloud", "cost_usd"), ("on_prem", "on_prem_cost_usd"))
                   if r["time_to_train_s"] is not None and r[key] is not None]
        return [{"scenario": options[i][2], "kind": options[i][3], "time_to_train_s": options[i][0],
                 "cost_usd": options[i][1]} for i in pareto_front([(o[0], o[1]) for o in options])]

    def to_json(self) -> dict:
        return {"table": self.rows(), "pareto_front": self.pareto(), "uncertainty": self.uncertainty,
                "plots": self.plots,
                "designs": [{"file": f, **r.to_json()} for f, r in zip(self.files, self.results)]}


def budget_text(scenario: Scenario) -> str:
    t = scenario.training
    if t.tokens is not None:
        for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
            if t.tokens >= scale:
                return f"{t.tokens / scale:.3g} {word} tokens"
        return f"{t.tokens:,.0f} tokens"
    if t.epochs is not None:
        return f"{t.epochs:g} epochs of {t.dataset_samples:,} samples"
    return ""


def compare(paths: list[Path], *, scaling_counts: Callable[[int], list[int]] | None = None,
            samples: int = 0, seed: int | None = None, progress: Callable | None = None,
            catalog: Catalog | None = None) -> Comparison:
    """Simulate each scenario (in the order given) and, with `samples`, the Monte-Carlo over them.
    GPU and link names resolve in `catalog` [the built-in one]."""
    loaded = [load_scenario(p) for p in paths]
    results = []
    iterable = progress(loaded) if progress else loaded
    for scenario, file in iterable:
        results.append(_run(scenario, file, scaling_counts, catalog))
    comparison = Comparison([f for _, f in loaded], [s for s, _ in loaded], results)
    if samples:
        from scalesim.uncertainty import Spread, monte_carlo

        chosen = seed if seed is not None else loaded[0][0].uncertainty.seed
        comparison.uncertainty = monte_carlo([r.inputs for r in results],
                                             [Spread.from_spec(s.uncertainty) for s, _ in loaded],
                                             samples=samples, seed=chosen)
    return comparison


def _run(scenario: Scenario, file: str, scaling_counts, catalog: Catalog | None = None) -> StepResult:
    if scaling_counts is None:
        return run(scenario, file, catalog=catalog)
    return run(scenario, file, scaling_counts=scaling_counts(prepare(scenario, file, catalog=catalog).gpus),
               catalog=catalog)
