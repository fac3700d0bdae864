"""Run several designs and assemble their comparison (what `scalesim compare` prints).

Each scenario is simulated as `scalesim run` does (with its scaling curve);
the rows hold what the table and plots need, and `designs` the full
`run --json` object of each, so scripts get all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import json

from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import SWEEP_SECONDS, fresh_budget
from scalesim.result import pareto_front
from scalesim.result import StepResult
from scalesim.app.caches import Caches
from scalesim.app.setup import prepare
from scalesim.app.run import run_setup
from scalesim.scenario import Scenario, load_scenario
from scalesim.app.plans import PlanPoint, cluster_for, own_plan_point, scenario_for
from scalesim.app.sweep import run_sweep


@dataclass
class Comparison:
    files: list[str]
    scenarios: list[Scenario]
    results: list[StepResult]
    uncertainty: dict | None = None
    plots: dict[str, str] = field(default_factory=dict)
    plans: list[dict] = field(default_factory=list)       # the plan each design ran, as designs[i].plan

    def rows(self) -> list[dict]:
        out = []
        plans = self.plans or [{} for _ in self.results]
        for file, r, s, plan in zip(self.files, self.results, self.scenarios, plans):
            on_prem = (r.economics.get("on_prem") or {}) if r.economics else {}
            cloud = (r.economics.get("cloud") or {}) if r.economics else {}
            out.append({
                "file": file, "scenario": r.scenario, "gpus": r.gpus, "gpu": r.gpu_name, "fits": r.fits,
                "model": s.model if isinstance(s.model, str) else s.model.get("name", "inline model"),
                "tokens": budget_text(s), "plan": plan.get("label"), "plan_searched": plan.get("searched", False),
                "gpu_hour_usd": cloud.get("gpu_hour_usd"),
                "purchase_usd": on_prem.get("capex_total_usd"),
                "break_even_months": break_even_months(r.gpus, cloud, on_prem, r.time_to_train_s),
                "memory_per_gpu_bytes": r.memory_per_gpu_bytes, "memory_capacity_bytes": r.memory_capacity_bytes,
                "step_time_s": r.step_time_s, "breakdown_s": r.breakdown.to_json(),
                "samples_per_s": r.samples_per_s, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu,
                "scaling_efficiency": r.scaling_efficiency, "scaling_reference_fits": r.scaling_reference_fits,
                "scaling_reference_memory_bytes": r.scaling_reference_memory_bytes, "time_to_train_s": r.time_to_train_s,
                "cost_usd": r.cost_usd, "on_prem_cost_usd": on_prem.get("cost_usd"),
                "usd_per_million_tokens": cloud.get("usd_per_million_tokens"),
                "on_prem_usd_per_million_tokens": on_prem.get("usd_per_million_tokens"),
                "energy_kwh": r.energy_kwh, "goodput": (r.reliability or {}).get("goodput"),
                "scaling": r.scaling,
            })
        return out

    def pareto(self) -> list[dict]:
        """The (design, cloud | on-prem) options on the cost-time Pareto front; only designs that fit
        (one that does not cannot run at any cost)."""
        options = [(r["time_to_train_s"], r[key], r["scenario"], kind)
                   for r in self.rows() if r["fits"]
                   for kind, key in (("cloud", "cost_usd"), ("on_prem", "on_prem_cost_usd"))
                   if r["time_to_train_s"] is not None and r[key] is not None]
        return [{"scenario": options[i][2], "kind": options[i][3], "time_to_train_s": options[i][0],
                 "cost_usd": options[i][1]} for i in pareto_front([(o[0], o[1]) for o in options])]

    def to_json(self) -> dict:
        return {"table": self.rows(), "pareto_front": self.pareto(), "uncertainty": self.uncertainty,
                "plots": self.plots,
                "designs": [{"file": f, **r.to_json(), **({"plan": {**r.plan, **p}} if p else {})}
                            for f, r, p in zip(self.files, self.results, self.plans or [{} for _ in self.results])]}


HOURS_PER_MONTH = 730.0        # 8,760 h / 12


def break_even_months(gpus: int, cloud: dict, on_prem: dict, wall_s: float | None) -> float | None:
    """Months of use (at the owned cluster's utilisation) after which buying costs less than renting:
    purchase / (rent per hour - electricity per hour). None when renting is never dearer or a price
    is missing."""
    price, capex, power = cloud.get("gpu_hour_usd"), on_prem.get("capex_total_usd"), on_prem.get("power_usd")
    if not price or not capex or power is None or not wall_s:
        return None
    saving_per_hour = gpus * price - power / (wall_s / 3600)
    if saving_per_hour <= 0:
        return None
    return capex / saving_per_hour / (HOURS_PER_MONTH * (on_prem.get("utilisation") or 1.0))


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


WORK_KEYS = (("model", lambda s: json.dumps(s.model, sort_keys=True, default=str)),
             ("training.seq_len", lambda s: s.training.seq_len),
             ("training.tokens", lambda s: s.training.tokens),
             ("training.epochs", lambda s: s.training.epochs),
             ("training.dataset_samples", lambda s: s.training.dataset_samples))


def check_same_work(loaded: list[tuple[Scenario, str]]) -> None:
    """Refuse designs that train different things (model, sequence length, token budget): their
    times and costs do not compare. InputError naming the differing keys."""
    first, first_file = loaded[0]
    for scenario, file in loaded[1:]:
        differ = [key for key, value in WORK_KEYS if value(scenario) != value(first)]
        if differ:
            detail = ", ".join(f"{k}: {_work_value(first, k)} in {first_file} but {_work_value(scenario, k)}"
                               for k in differ)
            raise InputError(f"the designs train different things ({detail}); compare designs doing the same "
                             "work, or give --allow-different-work to rank them anyway", file=file, key=differ[0])


def _work_value(scenario: Scenario, key: str):
    """As the YAML would say it: 1e+10 tokens, not 10000000000.0."""
    value = next(value for k, value in WORK_KEYS if k == key)(scenario) if key != "model" else (
        scenario.model if isinstance(scenario.model, str) else "an inline model")
    return f"{value:g}" if isinstance(value, float) else value


def best_plan(scenario: Scenario, file: str, rank_by: str = "time", catalog: Catalog | None = None,
              progress=None) -> tuple[Scenario, dict]:
    """The scenario at its best fitting plan for its own GPU count (the `sweep --search` search),
    and that plan; the scenario's own plan when no plan fits (then `fits` stays false)."""
    gpus = prepare(scenario, file, catalog=catalog).gpus
    kwargs = {"progress": progress} if progress is not None else {}
    sweep = run_sweep(scenario, file, [gpus], search=True, rank_by=rank_by, catalog=catalog, **kwargs)
    (best,) = sweep["best"]
    if best.get("status") != "ok":
        return scenario, {**own_plan(scenario, gpus), "searched": True, "found": False, "reason": best.get("reason")}
    point = PlanPoint(**{k: best[k] for k in PlanPoint.__dataclass_fields__})
    grown, _ = cluster_for(scenario, gpus, file, catalog)
    return scenario_for(scenario, point, file, grown), {**_plan_dict(point), "searched": True, "found": True}


def own_plan(scenario: Scenario, gpus: int) -> dict:
    """The scenario's own plan as designs[i].plan shows it."""
    point = own_plan_point(scenario, gpus)
    return {"searched": False} if isinstance(point, str) else {**_plan_dict(point), "searched": False}


def _plan_dict(point: PlanPoint) -> dict:
    return {"label": point.label, "recompute": point.recompute, "offload": point.offload,
            "finetune_method": point.finetune}


def compare(paths: list[Path], *, scaling_counts: Callable[[int], list[int]] | None = None,
            samples: int = 0, seed: int | None = None, progress: Callable | None = None,
            catalog: Catalog | None = None, search: bool = False, rank_by: str = "time",
            allow_different_work: bool = False, search_progress=None) -> Comparison:
    """Simulate each scenario (in the order given) and, with `samples`, the Monte-Carlo over them.
    GPU and link names resolve in `catalog` [the built-in one]. With `search` (or a scenario's
    `search: true`) each design runs at its best fitting plan, ranked by `rank_by`. Designs that
    train different things raise InputError unless `allow_different_work`."""
    loaded = [load_scenario(p) for p in paths]
    if not allow_different_work:
        check_same_work(loaded)
    results, plans, chosen = [], [], []
    iterable = progress(loaded) if progress else loaded
    for scenario, file in iterable:
        with fresh_budget():            # each design answers like a run of its own (scalesim/limits.py)
            searched = search or scenario.search
            if searched:
                with fresh_budget(SWEEP_SECONDS):       # the search is a sweep: a sweep's budget
                    scenario, plan = best_plan(scenario, file, rank_by, catalog, search_progress)
            setup = prepare(scenario, file, catalog=catalog, caches=Caches())
            chosen.append(scenario)
            plans.append(plan if searched else own_plan(scenario, setup.gpus))
            results.append(run_setup(setup, scaling_counts=None if scaling_counts is None
                                     else scaling_counts(setup.gpus)))
    comparison = Comparison([f for _, f in loaded], chosen, results, plans=plans)
    if samples:
        from scalesim.app.uncertainty import Spread, monte_carlo

        picked_seed = seed if seed is not None else loaded[0][0].uncertainty.seed
        comparison.uncertainty = monte_carlo([r.inputs for r in results],
                                             [Spread.from_spec(s.uncertainty) for s in chosen],
                                             samples=samples, seed=picked_seed, competing=[r.fits for r in results])
    return comparison
