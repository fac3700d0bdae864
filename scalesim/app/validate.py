"""Predictions against published measurements: the cases in validation/ and how each is scored.

Each case names what was measured (a collective's bus bandwidth, a training
run's throughput), the source, and either a collective to time or a scenario
to simulate. A case the simulator cannot run yet (a plan it does not model)
is reported as skipped with the reason, never silently dropped; a case whose
measurement is known not to describe working hardware is excluded, with why.
Errors are (predicted - measured) / measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic

from scalesim.errors import InputError
from scalesim.paths import data_dir
from scalesim.scenario import FabricSpec
from scalesim.schema import Strict, validate
from scalesim.topology.design import read_yaml

CATEGORIES = ("collective", "single_gpu", "multi_gpu", "multi_node", "serving")


class FabricCase(FabricSpec):
    """A collective case's fabric: a scenario's `fabric:`, rail-optimized unless it says otherwise."""

    topology: Literal["fat-tree", "rail-optimized", "single-switch"] = "rail-optimized"


class CollectiveCase(Strict):
    topology: str | dict[str, Any]
    nodes: pydantic.PositiveInt = 1
    fabric: FabricCase | None = None
    op: str = "all_reduce"
    gpus: pydantic.PositiveInt | None = None
    size: str | float
    algo: str = "auto"


class Case(Strict):
    id: str
    category: Literal["collective", "single_gpu", "multi_gpu", "multi_node", "serving"]
    source: str
    metric: Literal["busbw_GBps", "algbw_GBps", "samples_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                    "hardware_tflops_per_gpu", "step_time_s", "scaling_efficiency", "peak_memory_GiB",
                    "peak_reserved_GiB",
                    "output_tokens_per_s", "ttft_s"]
    measured: pydantic.PositiveFloat
    unit: str = ""
    notes: str = ""
    fast: bool = True                       # part of the quick subset the test suite runs
    collective: CollectiveCase | None = None
    scenario: str | None = None             # path relative to validation/ (training or serving)
    excluded: str | None = None             # why this measurement is not a prediction target
    # Why the simulator does not run this case yet (e.g. far too slow to simulate): reported as
    # skipped with the reason, never silently dropped, and simulated once the reason is gone.
    skip: str | None = None
    # Not in shared/validation (the tracked reference set): reported beside its figure, not in it.
    supplementary: bool = False
    known_miss: str | None = None           # what is known about a large error (counted all the same)
    # Collected by the project from the validation README's "More public measurements" list
    # (names that list's source): part of the tracked reference set though not in published.yaml.
    collected_from: str | None = None
    # The constants this case's measurement set (fitted or read off it); the headline figure
    # leaves such cases out, since a fit checked on its own data proves nothing.
    fitted_on: list[str] = []
    # The source's own evidence says it measured something other than the hardware: reported
    # in a row of its own, outside the tracked median and max.
    disputed: str | None = None

    @pydantic.model_validator(mode="after")
    def _one_target(self) -> "Case":
        if self.excluded is None and (self.collective is None) == (self.scenario is None):
            raise ValueError("give exactly one of 'collective' or 'scenario' (or 'excluded' with a reason)")
        return self


@dataclass(frozen=True, slots=True)
class Outcome:
    case: Case
    status: str                  # ok | skipped | excluded
    predicted: float | None
    reason: str | None = None
    fits: bool | None = None     # a training case: the plan fits the GPU's memory as `run` judges it

    @property
    def error(self) -> float | None:
        if self.predicted is None:
            return None
        return (self.predicted - self.case.measured) / self.case.measured

    def to_json(self) -> dict[str, Any]:
        return {"id": self.case.id, "category": self.case.category, "metric": self.case.metric,
                "predicted": self.predicted, "measured": self.case.measured, "error": self.error,
                "status": self.status, "reason": self.reason, "source": self.case.source,
                "known_miss": self.case.known_miss, "supplementary": self.case.supplementary,
                "fitted_on": self.case.fitted_on, "disputed": self.case.disputed,
                "collected_from": self.case.collected_from, "predicted_fits": self.fits}


def cases_file() -> Path:
    return data_dir("validation") / "cases.yaml"


def case_files() -> list[Path]:
    """cases.yaml, then one file per collected source under cases/ (sorted, so the order is fixed)."""
    main = cases_file()
    return [main, *sorted((main.parent / "cases").glob("*.yaml"))]


def _cases_in(path: Path) -> list[Case]:
    data = read_yaml(path, what="validation cases")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise InputError("expected a mapping with a 'cases' list", file=str(path))
    return [validate(Case, c, file=str(path), key_prefix=f"cases[{i}]") for i, c in enumerate(data["cases"])]


def load_cases(path: Path | None = None) -> list[Case]:
    paths = [path] if path is not None else case_files()
    cases = [case for p in paths for case in _cases_in(p)]
    ids = [c.id for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise InputError(f"duplicate case ids: {', '.join(duplicates)}", file=str(paths[0]))
    return cases


def megatron_flop_per_step(model, batch: int, seq: int) -> float:
    """FLOPs per iteration as Megatron-LM SC21 counts them, activation recomputation included.

    96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (Narayanan et al. 2021, eq. 3).
    """
    l, h, v = model.num_layers, model.hidden, model.vocab
    return 96 * batch * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h))


def _predict_collective(case: CollectiveCase, catalog=None) -> dict[str, float]:
    from scalesim.app.collective_bench import time_collective
    from scalesim.topology import build_cluster, load_node_design
    from scalesim.units import parse_bytes

    design = load_node_design(case.topology, key="collective.topology", catalog=catalog)
    fabric = None if case.fabric is None else case.fabric.as_fabric()
    topology = build_cluster(design, nodes=case.nodes, fabric=fabric, catalog=catalog)
    row = time_collective(topology, case.op, case.gpus or len(topology.gpus), parse_bytes(case.size), case.algo)
    return {"busbw_GBps": row.busbw_GBps, "algbw_GBps": row.algbw_GBps}


def _predict_training(path: Path, catalog=None, wanted: frozenset[str] | None = None) -> dict[str, float]:
    """The metrics `run` reports for the scenario, computed as it does, without what validate never
    reads (the fix search of a plan that does not fit, costs, the timeline's breakdown); the 1-GPU
    baseline behind `scaling_efficiency` only when `wanted` (the metrics asked for; None: all) has it."""
    from scalesim.app.run import per_gpu_rate
    from scalesim.app.setup import prepare, step_time_of
    from scalesim.scenario import load_scenario

    scenario, file = load_scenario(path)
    setup = prepare(scenario, file, catalog=catalog)
    step = step_time_of(setup)       # simulate_setup(setup).end_s without making the timeline
    model, gpus = setup.model, setup.gpus
    samples_per_s = scenario.training.global_batch / step
    tokens_per_s = samples_per_s * model.tokens_per_sample if model.tokens_per_sample else None
    if scenario.training.tokens is not None and tokens_per_s is None:
        raise InputError("the model does not take tokens; give epochs and dataset_samples instead",
                         file=setup.file, key="training.tokens")
    metrics = {"samples_per_s": samples_per_s,
               "tflops_per_gpu": model.model_flop_per_sample * samples_per_s / gpus / 1e12, "step_time_s": step,
               "peak_memory_GiB": setup.step.memory.total / 2**30,
               # torch.cuda.max_memory_reserved of world rank 0, as torchtitan (no PP), nanotron and fsdp_qlora log it
               "peak_reserved_GiB": setup.step.first_stage_memory.reserved / 2**30,
               # every measured training run really trained: a does-not-fit verdict on one is a miss
               "fits": float(setup.step.memory.total <= setup.gpu.memory_bytes)}
    if wanted is None or "scaling_efficiency" in wanted:
        # Throughput per GPU on N GPUs over that on one, same per-GPU batch: a check of the
        # multi-GPU model that a software stack's single-GPU speed does not blur.
        own = samples_per_s / gpus
        single = own if gpus == 1 else per_gpu_rate(setup, 1)
        if single:
            metrics["scaling_efficiency"] = own / single
    if tokens_per_s is not None:
        metrics["tokens_per_s_per_gpu"] = tokens_per_s / gpus
    from scalesim.models import get_model
    model = get_model(scenario.model, seq_len=scenario.training.seq_len)
    if model.hidden and model.tokens_per_sample:
        flop = megatron_flop_per_step(model, scenario.training.global_batch, model.tokens_per_sample)
        metrics["hardware_tflops_per_gpu"] = flop / step / gpus / 1e12
    return metrics


def _predict_serving(path: Path, catalog=None) -> dict[str, float]:
    """A serving scenario at its own load: output tokens/s and requests/s of all its replicas, and the
    median time to first token (`ttft_s`)."""
    from scalesim.app.serve import serve
    from scalesim.serving.spec import load_serving_scenario

    scenario, file = load_serving_scenario(path)
    result = serve(scenario, file, search=False, catalog=catalog)
    if not result["fits"]:
        raise InputError(f"does not fit: {result['reason']}", file=file)
    return {"output_tokens_per_s": result["output_tokens_per_s"], "requests_per_s": result["requests_per_s"],
            "ttft_s": result["ttft_s"]["p50"]}


def _predict_scenario(path: Path, catalog=None, wanted: frozenset[str] | None = None) -> dict[str, float]:
    data = read_yaml(path, what="scenario file")
    serving = isinstance(data, dict) and "serving" in data
    return _predict_serving(path, catalog) if serving else _predict_training(path, catalog, wanted)


def _predict(case: Case, catalog=None, wanted: frozenset[str] | None = None) -> dict[str, float]:
    """The metrics of the case's target; `wanted`: those its group asks for (costly extras only then)."""
    if case.collective is not None:
        return _predict_collective(case.collective, catalog)
    return _predict_scenario(cases_file().parent / case.scenario, catalog, wanted)


def target_key(case: Case) -> str:
    """What a case simulates: cases with the same key share one simulation."""
    if case.excluded is not None or case.skip is not None:
        return f"not simulated:{case.id}"
    if case.collective is not None:
        return "collective:" + case.collective.model_dump_json()
    return f"scenario:{case.scenario}"


def evaluate_group(cases: list[Case], catalog=None) -> list[Outcome]:
    """Outcomes of cases that share one target (see `target_key`), simulated once, with GPU and
    link names resolved in `catalog` [the built-in one]; cases of several targets (a list filtered by id
    prefix) are simulated target by target, in the order given."""
    if len(groups := groups_of(cases)) > 1:
        outcomes = {i: o for g in groups for i, o in zip(g, evaluate_group([cases[i] for i in g], catalog))}
        return [outcomes[i] for i in range(len(cases))]
    first = cases[0]
    if first.excluded is not None:
        return [Outcome(c, "excluded", None, c.excluded) for c in cases]
    if first.skip is not None:
        return [Outcome(c, "skipped", None, c.skip) for c in cases]
    try:
        metrics = _predict(first, catalog, frozenset(c.metric for c in cases))
    except InputError as exc:
        return [Outcome(c, "skipped", None, str(exc.detail)) for c in cases]
    fits = None if "fits" not in metrics else metrics["fits"] > 0
    return [Outcome(c, "ok", metrics[c.metric], fits=fits) if c.metric in metrics else
            Outcome(c, "skipped", None, f"the simulation gives no {c.metric} for this case") for c in cases]


def timed_group(cases: list[Case], catalog=None) -> tuple[list[Outcome], float, float, float, int]:
    """`evaluate_group`, with the CPU seconds it took in this process, its wall start and end
    (seconds since the epoch) and the process id: what `validate` records to schedule the long
    groups first."""
    import os
    import time

    start, cpu = time.time(), time.process_time()
    outcomes = evaluate_group(cases, catalog)
    return outcomes, time.process_time() - cpu, start, time.time(), os.getpid()


def groups_of(cases: list[Case]) -> list[list[int]]:
    """Indices of the cases, grouped by what they simulate, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault(target_key(case), []).append(i)
    return list(groups.values())


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    median_abs_error: float | None
    max_abs_error: float | None

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "median_abs_error": self.median_abs_error, "max_abs_error": self.max_abs_error}


def summarise(outcomes: list[Outcome]) -> Summary:
    errors = [abs(o.error) for o in outcomes if o.error is not None]
    if not errors:
        return Summary(0, None, None)
    return Summary(len(errors), statistics.median(errors), max(errors))


def group_of(case: Case) -> str:
    """Which summary row a case counts in: the headline (reference cases no constant was fitted
    on), in_sample (a constant was fitted on it), disputed, or supplementary."""
    if case.disputed:
        return "disputed"
    if case.supplementary:
        return "supplementary"
    if case.fitted_on:
        return "in_sample"
    return "reference"


def summaries(outcomes: list[Outcome]) -> dict[str, Summary]:
    """Per category and overall over the headline cases, then the rows kept apart."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(group_of(o.case), []).append(o)
    reference = groups.get("reference", [])
    rows = {c: summarise([o for o in reference if o.case.category == c])
            for c in sorted({o.case.category for o in reference})}
    rows["overall"] = summarise(reference)
    for name in ("in_sample", "disputed", "supplementary"):
        if groups.get(name):
            rows[name] = summarise(groups[name])
    serving = [o for o in groups.get("supplementary", []) if o.case.category == "serving"]
    if serving:     # serving cases are all supplementary; they get their own row too
        rows["serving"] = summarise(serving)
    return rows
