"""Sweeps over GPU counts and parallel plans: enumerate, evaluate, rank.

For each GPU count the scenario's cluster grows to ceil(gpus / GPUs per
node) nodes of its node design. A multi-node cluster needs `cluster.fabric`;
when the scenario has none, the sweep joins the nodes with the design's own
NICs (`nics.count` x `nics.link`; rail-optimized when there is a NIC per GPU,
else a fat-tree) and says so in its notes, or refuses when the design has no
NICs.

The global batch stays the scenario's (strong scaling: the batch is a
hyperparameter of the training recipe); each plan splits it.

Without `search` a GPU count gets one point: the scenario's own plan with
dp = gpus / (tp x pp x cp), its micro-batch lowered when dp x micro-batch
exceeds the global batch. With `search` every plan that could work is
enumerated: tp (powers of two within a node, dividing the heads), pp (powers
of two up to the layer count), dp the rest, ZeRO 0-3 (only 0 with dp = 1),
micro-batches (powers of two dividing the per-replica batch, up to 64) and
recompute none | selective | full. Context parallelism stays the scenario's.

Evaluation is two point -> row functions; neither ever raises (an
unexpected exception becomes a `failed` row with its type, message and where
it was raised), so one bad plan never loses the others:

1. `check_point`: build the plan and its memory (no simulation). A plan the
   simulator refuses raises InputError: recorded as `not_available` with the
   reason, never best. A plan whose memory exceeds the GPU is `does_not_fit`;
   so is, without a check, any plan of the same split that needs at least as
   much memory (a micro-batch no smaller, recompute no heavier, ZeRO stage no
   higher).
2. `evaluate_point`: simulate one step and cost the run. This is the
   expensive part: it runs on an executor (scalesim/app/executors.py: this
   process, a process pool or a Dask cluster) and each row is written to the
   points file as it finishes (scalesim/app/points_file.py), so `--resume` skips
   the plans already simulated. Rows are ordered by point, never by
   completion: every executor gives the same output, byte for byte.

Between the two, a fitting plan is `dominated` (not simulated) when

- another fitting plan of the same GPU count, tp, pp, cp and micro-batch has
  a lower or equal ZeRO stage, a lighter or equal recompute and no more
  offload: it does the same work with no more communication, recomputation
  or host traffic; or
- it offloads (or adapts instead of training) while the same plan offloading
  (adapting) less fits; or
- without pipeline parallelism, a fitting plan with the same tp, cp, ZeRO
  stage and recompute has a larger micro-batch: the same communication per
  step with fewer, larger kernels;
- with pipeline parallelism (where smaller micro-batches shrink the bubble),
  a larger fitting micro-batch already gives at least 8 x pp micro-batches
  per step (1F1B bubble (pp-1)/(m+pp-1) <= 1/9, so a smaller one gains at
  most that), or the plan has fewer micro-batches than stages (bubble >= 50%)
  while a smaller micro-batch with enough of them fits.

Heuristics, documented as such; `exhaustive` turns the pruning off. Exact, also off with
`exhaustive`: the plans left are simulated in fixed waves, lowest step-time bound first
(scalesim/parallel/bounds.py: compute at full speed, the pipeline's fill and drain), and a plan
whose bound exceeds the best step already simulated at its GPU count is `dominated` without
being simulated (it cannot be best by time or by cost).

Statuses: ok, dominated, does_not_fit, not_available, and failed (an
unexpected exception: a bug to report, never a property of the plan).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pydantic

from scalesim.app.caches import Caches
from scalesim.app.executors import ExecutorSpec, completed, open_pool
from scalesim.app.plans import (FINETUNE, INTERLEAVED_FALLBACK_NOTE, OFFLOAD, RECOMPUTE, PlanPoint, Progress, _failure, _plain, _row, check_points, refused_row,
                                SweepBudget, charge_checks, cluster_for, own_plan_point, scenario_for, search_points)
from scalesim.app.points_file import PointsFile
from scalesim.app.run import run
from scalesim.app.setup import prepare
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import no_budget
from scalesim.parallel.bounds import beaten, best_steps, bound_waves, compiled_bound_s
from scalesim.program import no_collection
from scalesim.scenario import Scenario
from scalesim.units import format_bytes

PIPELINE_MICRO_BATCHES = 8     # per stage: beyond this many micro-batches the 1F1B bubble is <= 1/9
STATUSES = ("ok", "dominated", "does_not_fit", "not_available", "failed")
IN_PROCESS = ExecutorSpec("local", 1)


def evaluate_point(point: PlanPoint, base: Scenario, file: str | None = None, grown: Scenario | None = None,
                   catalog: Catalog | None = None, caches: Caches | None = None) -> dict:
    """Simulate one step of the plan and cost the whole run: one result row."""
    with no_collection():       # the step's objects are freed (no cycles) before the collector runs again
        return _evaluated(point, base, file, grown, catalog, caches)


def _evaluated(point: PlanPoint, base: Scenario, file: str | None, grown: Scenario | None,
               catalog: Catalog | None, caches: Caches | None) -> dict:
    try:
        scenario = scenario_for(base, point, file, grown)
        with no_budget():           # charged by the sweep (SweepBudget): the same on every executor
            result = run(scenario, file, baseline=False, catalog=catalog, caches=caches)
    except (InputError, pydantic.ValidationError) as exc:
        return refused_row(point, exc)
    except Exception as exc:       # noqa: BLE001 - a bug, recorded on its row (module docstring)
        return _row(point, "failed", _failure(exc))
    on_prem = (result.economics.get("on_prem") or {}).get("cost_usd") if result.economics else None
    return _row(point, "ok" if result.fits else "does_not_fit", result.reason,
                nodes=scenario.cluster.nodes, memory_per_gpu_bytes=result.memory_per_gpu_bytes,
                memory_capacity_bytes=result.memory_capacity_bytes, step_time_s=result.step_time_s,
                samples_per_s=result.samples_per_s, tokens_per_s=result.tokens_per_s,
                tokens_per_s_per_gpu=None if result.tokens_per_s is None else result.tokens_per_s / point.gpus,
                mfu=result.mfu, exposed_comm_s=result.breakdown.exposed_comm, bubble_s=result.breakdown.bubble,
                time_to_train_s=result.time_to_train_s, cost_usd=result.cost_usd, on_prem_cost_usd=on_prem,
                energy_kwh=result.energy_kwh, goodput=(result.reliability or {}).get("goodput"))


def mark_dominated(rows: list[dict], global_batch: int) -> None:
    """Mark fitting plans that another fitting plan beats (see the module docstring), in place."""
    fitting = [r for r in rows if r["status"] == "ok"]
    by_split: dict[tuple, list[dict]] = {}
    for r in fitting:
        by_split.setdefault((r["gpus"], r["tp"], r["pp"], r["cp"], r["zero"], r["recompute"], r["offload"],
                             r["finetune"]), []).append(r)
    for members in by_split.values():
        members.sort(key=lambda r: -r["micro_batch"])            # largest micro-batch first
        pp = members[0]["pp"]
        if pp == 1:
            for r in members[1:]:
                _dominate(r, members[0], "a larger micro-batch, same communication")
            continue
        enough = next((r for r in members if _micro_batches(r, global_batch) >= PIPELINE_MICRO_BATCHES * pp), None)
        deep = next((r for r in members if _micro_batches(r, global_batch) >= pp), None)
        for r in members:
            m = _micro_batches(r, global_batch)
            if enough is not None and r["micro_batch"] < enough["micro_batch"]:
                _dominate(r, enough, f"already {PIPELINE_MICRO_BATCHES} x pp micro-batches or more "
                                     "(1F1B bubble <= 1/9); smaller ones gain at most that")
            elif m < pp and deep is not None and deep is not r:
                _dominate(r, deep, f"enough micro-batches to fill the pipeline (here {m} < pp = {pp}: "
                                   "bubble >= 50%)")
    fitting = [r for r in fitting if r["status"] == "ok"]
    groups: dict[tuple, list[dict]] = {}
    for r in fitting:
        groups.setdefault((r["gpus"], r["tp"], r["pp"], r["cp"], r["micro_batch"], r["finetune"]), []).append(r)
    for members in groups.values():
        for r in members:
            for other in members:
                better = (other["zero"] <= r["zero"] and RECOMPUTE.index(other["recompute"])
                          <= RECOMPUTE.index(r["recompute"]) and OFFLOAD.index(other["offload"])
                          <= OFFLOAD.index(r["offload"]))
                if other is not r and better and other["status"] == "ok":
                    _dominate(r, other, "no more communication or recompute")
                    break


def _micro_batches(row: dict, global_batch: int) -> int:
    return global_batch // (row["dp"] * row["micro_batch"])


def _dominate(row: dict, by: dict, why: str) -> None:
    row["status"] = "dominated"
    row["reason"] = f"{by['plan']} also fits: {why}"


def rank_key(rank_by: str) -> Callable[[dict], tuple]:
    """Sort key for simulated rows: time to train (or step throughput) or cloud cost."""
    def time_value(r):
        if r["time_to_train_s"] is not None:
            return r["time_to_train_s"]
        return 1.0 / r["samples_per_s"] if r["samples_per_s"] else math.inf

    def key(r):
        if rank_by == "cost" and r["cost_usd"] is not None:
            return (r["cost_usd"], time_value(r))
        return (time_value(r), r["cost_usd"] if r["cost_usd"] is not None else math.inf)
    return key


def best_rows(rows: list[dict], rank_by: str) -> dict[int, dict | None]:
    """The best simulated plan that fits, per GPU count (None where nothing fits or runs); a plan
    that trains the scenario's own way beats any that adapts instead (LoRA / QLoRA change the work)."""
    out: dict[int, dict | None] = {}
    for gpus in sorted({r["gpus"] for r in rows}):
        simulated = [r for r in rows if r["gpus"] == gpus and r["status"] == "ok" and r["step_time_s"] is not None]
        least = min((FINETUNE.index(r.get("finetune", "none")) for r in simulated), default=0)
        simulated = [r for r in simulated if FINETUNE.index(r.get("finetune", "none")) == least]
        out[gpus] = min(simulated, key=rank_key(rank_by)) if simulated else None
    return out


def run_sweep(base: Scenario, file: str | None, gpu_counts: list[int], *, search: bool = False,
              rank_by: str = "time", exhaustive: bool = False, progress: Progress = _plain,
              executor: ExecutorSpec = IN_PROCESS, points_file: PointsFile | None = None,
              catalog: Catalog | None = None) -> dict:
    """Evaluate the sweep; returns {"rows", "best", "notes", "rank_by", ...} (all JSON-able).
    GPU and link names resolve in `catalog` [the built-in one].

    Simulations run on `executor` (opened only when there is something to simulate); each
    finished row goes to `points_file`, and plans it already holds are not simulated again.
    """
    if rank_by not in ("time", "cost"):
        raise InputError(f"unknown ranking '{rank_by}'; allowed: time, cost", key="--rank")
    notes: list[str] = []
    points: list[PlanPoint] = []
    rows: list[dict] = []
    grown: dict[int, Scenario] = {}
    if base.parallel.pp_schedule == "interleaved":
        notes.append(INTERLEAVED_FALLBACK_NOTE)
    for gpus in gpu_counts:
        grown[gpus], extra = cluster_for(base, gpus, file, catalog)
        notes += [n for n in extra if n not in notes]
        if search:
            found, skipped = search_points(base, gpus, file, catalog)
            points += found
            rows += skipped
        else:
            own = own_plan_point(base, gpus)
            if isinstance(own, str):
                rows.append(_row(PlanPoint(gpus, 0), "not_available", own))
            else:
                points.append(own)
    caches = Caches()           # this sweep's clusters and plans, reused by every plan simulated here
    tasks: dict[PlanPoint, float] = {}
    charge_checks(len(points), search, len(gpu_counts))
    checked = check_points(points, base, file, grown, progress, catalog, caches, tasks)
    if search and not exhaustive:
        mark_dominated(checked, base.training.global_batch)
    by_point = dict(zip(points, checked))
    by_point.update(simulate_points([p for p in points if by_point[p]["status"] == "ok"], base, file, grown,
                                    executor, points_file, progress, catalog, prune=search and not exhaustive,
                                    caches=caches, budget=SweepBudget(tasks, search, len(gpu_counts))))
    rows += [by_point[p] for p in points]
    rows.sort(key=lambda r: r["gpus"])          # stable: plan order within a count
    over = [r for r in rows if "estimated_tasks" in r]
    if over:
        notes.append(f"{len(over)} plans not simulated, e.g. {over[0]['plan']}: {over[0]['reason']}")
    best = best_rows(rows, rank_by)
    return {"scenario": base.name, "file": file, "rank_by": rank_by, "search": search,
            "gpu_counts": gpu_counts, "notes": notes,
            "best": [{"gpus": g, **(b or {"status": "none", "nodes": grown[g].cluster.nodes,
                                          "reason": _none_reason(rows, g)})} for g, b in best.items()],
            "summary": {g: {s: sum(1 for r in rows if r["gpus"] == g and r["status"] == s) for s in STATUSES}
                        for g in gpu_counts},
            "rows": rows}


def simulate_points(points: list[PlanPoint], base: Scenario, file: str | None, grown: dict[int, Scenario],
                    executor: ExecutorSpec = IN_PROCESS, points_file: PointsFile | None = None,
                    progress: Progress = _plain, catalog: Catalog | None = None,
                    prune: bool = False, caches: Caches | None = None,
                    budget: SweepBudget | None = None) -> dict[PlanPoint, dict]:
    """`evaluate_point` of each point on the executor (rows of the points file reused), by point.
    `budget`: without `prune`, the points to simulate are refused together when over it; with
    `prune`, plans are simulated, lowest bound first, while it lasts, and the rest say so.

    `prune`: simulate in waves, lowest step-time bound first, and mark `dominated` the plans
    whose bound exceeds the best step simulated at their GPU count (scalesim/parallel/bounds.py).
    `caches` serve the bounds and the simulations run in this process (other processes keep their own).
    """
    caches = Caches() if caches is None else caches
    earlier: dict[PlanPoint, dict] = {}
    for p in points:
        row = points_file.finished(asdict(p)) if points_file is not None else None
        if row is not None:
            earlier[p] = row
    if budget is not None and not prune:
        budget.refuse_over([p for p in points if p not in earlier])
    if not prune:
        pending = sorted((p for p in points if p not in earlier), key=lambda p: -_work_estimate(p, base))
        waves, bounds = [pending] if pending else [], {}
    else:
        # Waves over every point, reused ones included, so that a resumed search prunes the same plans.
        bounds = {p: compiled_bound_s(prepare(scenario_for(base, p, file, grown.get(p.gpus)), file, catalog=catalog,
                                              caches=caches).step) for p in points}
        waves = bound_waves(sorted(points, key=lambda p: bounds[p]))
        pending = [p for p in points if p not in earlier]
    rows = dict(earlier)
    if not pending:
        return rows
    with open_pool(executor) as pool:
        shared = caches if executor.kind == "local" and executor.workers == 1 else None   # never pickled
        finished = _in_waves(pool, waves, bounds, earlier, base, file, grown, catalog, shared, budget)
        for p, row in progress(finished, "simulating", len(pending)):
            rows[p] = row
            if points_file is not None and not (bounds and row["status"] == "dominated"):   # pruned: not simulated
                points_file.write(row)
    return rows


def _in_waves(pool, waves: list[list[PlanPoint]], bounds: dict[PlanPoint, float], earlier: dict[PlanPoint, dict],
              base: Scenario, file: str | None, grown: dict[int, Scenario], catalog: Catalog | None,
              caches: Caches | None, budget: SweepBudget | None = None):
    """(point, row) of each point not in `earlier`, as each finishes, wave after wave. With
    `bounds`, a plan whose bound exceeds the best step simulated in the earlier waves (in this
    run or, resumed, in an earlier one) at its GPU count is marked dominated, not simulated;
    with `budget`, so is one the answer budget has no room left for (not_available, saying so)."""
    before: list[dict] = []          # rows of the earlier waves: a wave is pruned by those alone
    for wave in waves:
        best = best_steps(before) if bounds else {}
        before += [earlier[p] for p in wave if p in earlier]
        wave = [p for p in wave if p not in earlier]
        for p in [p for p in wave if beaten(bounds[p], best.get(p.gpus))] if bounds else []:
            wave.remove(p)
            yield p, _row(p, "dominated", f"its compute alone takes at least {bounds[p]:.4g} s per step "
                          f"(parallel/bounds.py), more than the {best[p.gpus]:.4g} s of a simulated plan")
        for p, row in [(p, budget.admit(p)) for p in wave] if budget is not None and bounds else []:
            if row is not None:
                wave.remove(p)
                yield p, row
        payloads = [(p, base, file, grown.get(p.gpus), catalog, caches)   # ~3 kB each (more with a catalog)
                    for p in wave]
        for i, row in completed(pool, evaluate_point, payloads):
            if isinstance(row, Exception):            # the task itself was lost (a worker died, ...)
                row = _row(wave[i], "failed", _failure(row))
            before.append(row)
            yield wave[i], row


def _work_estimate(point: PlanPoint, base: Scenario) -> int:
    """Micro-batches x pipeline stages: a proxy of simulation time, so the longest go first and the
    workers finish together."""
    return max(1, base.training.global_batch // (point.dp * point.micro_batch)) * point.pp


def _none_reason(rows: list[dict], gpus: int) -> str:
    """Why no plan is best: the smallest memory any plan needs when plans ran out of memory."""
    here = [r for r in rows if r["gpus"] == gpus]
    big = [r for r in here if r["status"] == "does_not_fit" and r.get("memory_per_gpu_bytes")
           and r["memory_per_gpu_bytes"] > r["memory_capacity_bytes"]]
    if big:
        least = min(big, key=lambda r: r["memory_per_gpu_bytes"])
        return (f"no plan fits; the smallest needs {format_bytes(least['memory_per_gpu_bytes'])} per GPU "
                f"of {format_bytes(least['memory_capacity_bytes'])} ({least['plan']})")
    reasons = [r["reason"] for r in here if r["reason"]]
    return f"no plan runs and fits; e.g. {reasons[0]}" if reasons else "no plan runs and fits"


def parse_counts(text: str) -> list[int]:
    """'8,16,32' -> [8, 16, 32]; positive integers, duplicates dropped, order kept."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdecimal() or int(part) < 1:    # isdigit() would pass "²", which int() refuses
            raise InputError(f"'{part}' is not a GPU count; give positive integers like 8,16,32", key="--gpus")
        if int(part) not in counts:
            counts.append(int(part))
    return counts


CSV_COLUMNS = ("gpus", "nodes", "plan", "dp", "tp", "pp", "cp", "zero", "micro_batch", "recompute", "status",
               "reason", "memory_per_gpu_bytes", "memory_capacity_bytes", "step_time_s", "samples_per_s",
               "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "exposed_comm_s", "bubble_s", "time_to_train_s",
               "cost_usd", "on_prem_cost_usd", "energy_kwh", "goodput", "offload", "finetune")


def write_outputs(sweep: dict, directory: Path) -> dict[str, Path]:
    """sweep.csv (every row) and sweep.json (everything) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = directory / "sweep.csv", directory / "sweep.json"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in sweep["rows"]:
            writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_COLUMNS})
    json_path.write_text(json.dumps(sweep, indent=2))
    return {"csv": csv_path, "json": json_path}
