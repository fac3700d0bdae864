"""Leave-one-source-out: each source's cases predicted with constants fitted without that source.

A constant fitted on a source's measurements and then checked on them proves
nothing. `validation/fits.yaml` lists every constant fitted on validation
cases, the source it was fitted on and the value it takes without that
source (from other sources only). A source's cases are re-predicted with a
catalog carrying those values; a source no fit used keeps its prediction,
since no constant saw it. The median of these errors is the accuracy a user
whose run is in none of our sources can expect.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pydantic

from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog, load_catalog
from scalesim.paths import data_dir
from scalesim.schema import Strict, read_yaml, validate
from scalesim.app.executors import completed, open_pool, parse_executor
from scalesim.app.validate import group_of, groups_of, summarise, target_key, timed_group


class Fit(Strict):
    name: str
    gpu: str | list[str] | None = None     # GPU names, or "*" for every GPU
    link: str | list[str] | None = None
    field: str
    fitted: float
    source: str
    without: pydantic.PositiveFloat
    why: str

    @pydantic.model_validator(mode="after")
    def _one_target(self) -> "Fit":
        if (self.gpu is None) == (self.link is None):
            raise ValueError("give exactly one of 'gpu' or 'link'")
        return self

    def names(self) -> tuple[str, ...]:
        target = self.gpu if self.gpu is not None else self.link
        return (target,) if isinstance(target, str) else tuple(target)


def fits_file() -> Path:
    return data_dir("validation") / "fits.yaml"


def load_fits(path: Path | None = None) -> list[Fit]:
    path = path or fits_file()
    data = read_yaml(path, what="fitted constants")
    if not isinstance(data, dict) or not isinstance(data.get("fits"), list):
        raise InputError("expected a mapping with a 'fits' list", file=str(path))
    return [validate(Fit, f, file=str(path), key_prefix=f"fits[{i}]") for i, f in enumerate(data["fits"])]


def source_key(case) -> str:
    """The source a case's measurement comes from: its collected-from list item, else the
    repository (or issue thread, or paper) its `source` names.

    >>> from types import SimpleNamespace as C
    >>> source_key(C(collected_from=None, source="https://github.com/NVIDIA/nccl-tests/issues/175 (x)"))
    'NVIDIA/nccl-tests/issues/175'
    >>> source_key(C(collected_from=None, source="lambdal/deeplearning-benchmark pytorch/a.csv"))
    'lambdal/deeplearning-benchmark'
    """
    if case.collected_from:
        return case.collected_from
    first = case.source.strip().strip("'\"").split()[0]
    first = re.sub(r"^https?://(www\.)?github\.com/", "", first)
    return first.split("@")[0].split("#")[0].rstrip("/,")


def catalog_without(catalog: Catalog, fits: list[Fit]) -> Catalog:
    """The catalog with each fit's constant at its value without its source."""
    gpus, links = list(catalog.gpu_specs), list(catalog.link_specs)
    for fit in fits:
        names = fit.names()
        specs = gpus if fit.gpu is not None else links
        for i, spec in enumerate(specs):
            if "*" in names or spec.name in names:
                specs[i] = dataclasses.replace(spec, **{fit.field: fit.without})
    return dataclasses.replace(catalog, gpu_specs=tuple(gpus), link_specs=tuple(links))


def loso_catalogs(cases, catalog: Catalog | None, fits: list[Fit]) -> dict[str, Catalog]:
    """For each source some fit used and some case comes from: the catalog without its fits."""
    base = catalog or load_catalog([])
    sources = {source_key(c) for c in cases}
    by_source: dict[str, list[Fit]] = {}
    for fit in fits:
        if fit.source in sources:
            by_source.setdefault(fit.source, []).append(fit)
    return {source: catalog_without(base, group) for source, group in sorted(by_source.items())}


def loso_jobs(cases, catalog: Catalog | None, fits: list[Fit]) -> list[tuple[list[int], Catalog]]:
    """(case indices, catalog) to re-predict: each fitted source's counted cases, grouped by what
    they simulate, with its catalog without the fits it fed."""
    jobs = []
    for source, without in loso_catalogs(cases, catalog, fits).items():
        counted = [i for i, c in enumerate(cases)
                   if source_key(c) == source and group_of(c) in ("reference", "in_sample")]
        jobs += [([counted[j] for j in group], without) for group in groups_of([cases[i] for i in counted])]
    return jobs


def loso_summaries(outcomes: list, replaced: dict[int, object]) -> dict:
    """Per category and overall: every counted case (reference and in-sample) predicted out of
    sample - re-predicted where a fit used its source, as it is elsewhere."""
    counted = [replaced.get(i, o) for i, o in enumerate(outcomes)
               if group_of(o.case) in ("reference", "in_sample")]
    rows = {c: summarise([o for o in counted if o.case.category == c])
            for c in sorted({o.case.category for o in counted})}
    rows["overall"] = summarise(counted)
    return rows


def costs_file() -> Path:
    return data_dir("validation") / "costs.json"


def load_costs(path: Path | None = None) -> dict[str, float]:
    """CPU seconds each target (`target_key`) took when last measured
    (benchmarks/validate_profile.py --write); {} when there is no such file or it is unreadable:
    the costs only order the work, never change a result."""
    try:
        data = json.loads((path or costs_file()).read_text())
    except (OSError, ValueError):
        return {}
    costs = data.get("cpu_s") if isinstance(data, dict) else None
    return {k: float(v) for k, v in costs.items() if isinstance(v, (int, float))} if isinstance(costs, dict) else {}


def validation_jobs(cases, catalog: Catalog | None, fits: list[Fit]) -> list[tuple[list[int], Catalog | None, bool]]:
    """(case indices, catalog, left-one-source-out?) for every group `validate` simulates: each
    target with `catalog`, then each fitted source's cases without the fits it fed."""
    return ([(g, catalog, False) for g in groups_of(cases)]
            + [(g, without, True) for g, without in loso_jobs(cases, catalog, fits)])


def longest_first(jobs: list, cases, costs: dict[str, float]) -> list[int]:
    """Job positions in the order to start them: targets with no recorded cost first (new cases,
    often the long ones; those outside the quick subset before the rest), then by recorded cost,
    longest first, so that no long job starts last while the other workers idle. Ties keep the
    jobs' order; the order never changes a result."""
    def cost(k: int) -> tuple[int, float]:
        first = cases[jobs[k][0][0]]
        known = costs.get(target_key(first))
        if known is None:
            return (0, float(all(cases[i].fast for i in jobs[k][0])))
        return (1, -known)
    return sorted(range(len(jobs)), key=cost)


def evaluate_all(cases, catalog: Catalog | None, workers: int | None, progress=None,
                 timings: list | None = None) -> tuple[list, dict]:
    """`validate`: every case predicted with `catalog`, then each fitted source's cases again
    without the fits it fed (leave one source out). Returns the outcomes in case order and the
    re-predicted ones by case index; `progress(finished, total)` may wrap the groups as they end;
    `timings`, a list, receives per group (target key, left out?, CPU s, wall start, wall end, pid).

    Cases that share a scenario are simulated once; the long ones go first (`longest_first`) so
    that the pool never waits on one at the end. Results are the same for any number of workers.
    """
    jobs = validation_jobs(cases, catalog, load_fits())
    order = longest_first(jobs, cases, load_costs())
    outcomes: list = [None] * len(cases)
    replaced: dict = {}
    with open_pool(parse_executor("local", workers)) as pool:
        finished = completed(pool, timed_group, [([cases[i] for i in jobs[k][0]], jobs[k][1]) for k in order])
        for n, result in (finished if progress is None else progress(finished, len(jobs))):
            if isinstance(result, BaseException):
                raise result
            indices, _, left_out = jobs[order[n]]
            group_outcomes, *timing = result
            for i, outcome in zip(indices, group_outcomes):
                (replaced if left_out else outcomes)[i] = outcome
            if timings is not None:
                timings.append((target_key(cases[indices[0]]), left_out, *timing))
    return outcomes, replaced
