"""From a checked, compiled step to a result: simulate, summarise, cost, and say what would fit.

`prepare` (scalesim/app/setup.py) resolves and compiles; `run_setup` plays the step out and
reads everything a user sees from it; `run` does both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from scalesim.app.caches import Caches
from scalesim.app.fitting import combined_option, describe, fit_options, more_gpus_option, most_sharded
from scalesim.app.forked import Forked
from scalesim.app.host_causes import eager_parts, host_causes
from scalesim.app.procurement import nodes_charged, run_inputs
from scalesim.app.setup import Setup, host_fit_reason, prepare, simulate_setup, step_time_of
from scalesim.costs.economics import training_economics
from scalesim.costs.finetune import trained_params
from scalesim.costs.memory import MemoryBreakdown, fit_confidence
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.hardware.user_catalog import Catalog
from scalesim.engine.fast_forward import exact_simulation
from scalesim.limits import TASKS_PER_SECOND, OverBudget, charge, check_affordable, time_limit
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.size import step_cost
from scalesim.result import StepResult, memory_parts, rank_breakdowns
from scalesim.scenario import Scenario
from scalesim.scenario.frameworks import framework_summary
from scalesim.scenario.graphs import graphs_blocked_by
from scalesim.timeline import Columns, Timeline, columns
from scalesim.units import format_bytes


def _fit_reason(memory: MemoryBreakdown, capacity: float, gpu: GpuSpec) -> str | None:
    if memory.total <= capacity:
        return None
    takes = memory_parts(dict(sorted(memory.as_dict().items(), key=lambda kv: -kv[1])))     # largest first
    return (f"needs {format_bytes(memory.total)} per GPU but the {gpu.full_name} has "
            f"{format_bytes(capacity)} ({takes})")


def per_gpu_rate(setup: Setup, gpus: int) -> float | None:
    """Samples/s per GPU of the same plan on `gpus` GPUs with the same per-replica work.

    Weak scaling: micro-batch and micro-batches per step stay, the data-parallel
    degree (and the global batch) follows the GPU count. On one GPU the plan
    has no model parallelism. None when `gpus` cannot hold the plan.
    """
    if gpus == setup.gpus:
        return _rate(setup)
    point = scaling_point(setup, gpus)
    return None if point is None else _rate(point)


def scaling_point(setup: Setup, gpus: int) -> Setup | None:
    """The plan of `per_gpu_rate` on `gpus` GPUs, prepared (not simulated); None when `gpus`
    cannot hold it. OverBudget when its step alone is over the command's answer budget."""
    pl = setup.plan.placement
    per_replica = setup.plan.micro_batch * setup.plan.micro_batches
    if gpus == 1:
        changes = {"parallel": {"dp": None, "tp": 1, "pp": 1, "cp": 1, "pp_schedule": "1f1b",
                                "virtual_stages": 1, "param_gather_with_optimizer_step": False,
                                "sequence_parallel": False, "tp_recompute_allgather": True,
                                "ep": 1, "etp": None,
                                "pipeline_layout": None, "decoder_first_pipeline_num_layers": None,
                                "decoder_last_pipeline_num_layers": None}}
        dp = 1
    else:
        if gpus % (pl.tp * pl.pp * pl.cp) or (gpus // (pl.tp * pl.pp) * (pl.tp if pl.etp == 1 else 1)) % pl.ep:
            return None
        changes = {"parallel": {"dp": None}}
        dp = gpus // (pl.tp * pl.pp * pl.cp)
    scenario = setup.scenario.with_changes(training={"global_batch": per_replica * dp}, **changes)
    return prepare(scenario, setup.file, gpus=gpus, catalog=setup.catalog, caches=setup.caches,
                   every_rank=setup.every_rank_asked)


def _rate(setup: Setup) -> float:
    """Samples/s per GPU of the prepared setup, simulated."""
    plan = setup.plan
    return plan.micro_batch * plan.micro_batches * plan.placement.dp / step_time_of(setup) / setup.gpus


def _cost_basis(setup: Setup) -> dict:
    """How the run is charged for its nodes' servers, network and host power (procurement.py nodes_charged)."""
    nodes, basis = nodes_charged(setup.scenario, setup.gpus, setup.file, getattr(setup, "catalog", None),
                                 getattr(setup, "caches", None))
    return {"cost_basis": basis, "nodes_charged": nodes}


def plan_summary(plan: ParallelPlan) -> dict:
    pl = plan.placement
    out = {"dp": pl.dp, "tp": pl.tp, "pp": pl.pp, "cp": pl.cp, "zero": plan.zero,
           "micro_batch": plan.micro_batch, "micro_batches": plan.micro_batches, "precision": plan.precision}
    if pl.ep > 1:
        out["ep"] = pl.ep
    if plan.finetune is not None:
        out["finetune"] = f"{plan.finetune.method} r{plan.finetune.rank} {','.join(plan.finetune.targets)}"
    if plan.offload_params:
        out["offload_params"] = True
    if pl.pp > 1:
        out["pp_schedule"] = plan.schedule + (f" x{plan.virtual_stages}" if plan.chunks_per_stage > 1 else "")
    return out


def _with_trainable(summary: dict, setup: Setup) -> dict:
    """The plan summary, with the count of trained parameters when fine-tuning trains adapters only."""
    if setup.plan.finetune is None:
        return summary
    return {**summary, "trainable_params": trained_params(setup.model.layers, setup.plan.finetune)}


def run(scenario: Scenario, file: str | None = None, *, scaling_counts: list[int] | None = None,
        baseline: bool = True, catalog: Catalog | None = None, max_seconds: float | None = None,
        every_rank: bool | None = None, caches: Caches | None = None, exact: bool = False) -> StepResult:
    """Simulate one step of the scenario, and the same plan on fewer GPUs for scaling.

    `baseline` False skips the 1-GPU run behind `scaling_efficiency` (then None), as sweeps do.
    `max_seconds`: raise scalesim.limits.TimeLimitExceeded (an InputError) after that much wall time.
    `every_rank`, `caches`: see `prepare`. `exact`: play every task of every step (no fast-forward
    of repeating periods, scalesim/engine/fast_forward.py; the same results within 1e-9).
    """
    if exact:
        with exact_simulation():
            return run(scenario, file, scaling_counts=scaling_counts, baseline=baseline, catalog=catalog,
                       max_seconds=max_seconds, every_rank=every_rank, caches=caches)
    if max_seconds is not None:
        with time_limit(max_seconds):
            return run(scenario, file, scaling_counts=scaling_counts, baseline=baseline, catalog=catalog,
                       every_rank=every_rank, caches=caches)
    return run_setup(prepare(scenario, file, catalog=catalog, every_rank=every_rank, caches=caches),
                     scaling_counts=scaling_counts, baseline=baseline)


def run_setup(setup: Setup, *, scaling_counts: list[int] | None = None, baseline: bool = True,
              forked: bool = False, on_step: Callable[[Timeline, Columns], object] | None = None) -> StepResult:
    """`run` of a scenario already prepared (the CLI prepares first, to fail before any work).
    `forked`: play the scaling curve's points in a forked process beside the step (app/forked.py;
    the same numbers), when the plan fits (else the what-if fixes come first, each simulated).
    `on_step`: called with the step's timeline and its `columns` once it is played, before the scaling
    curve is (the CLI draws the timeline plot there while the forked process plays the curve)."""
    if forked and setup.gpus > 1 and (baseline or scaling_counts) and _fits_before_simulating(setup):
        with Forked(partial(_rates_after_step, setup, baseline, scaling_counts),
                    here=partial(_scaling_rates, setup, baseline, scaling_counts)) as rates:
            return _run_setup(setup, scaling_counts, baseline, rates.result, on_step, beside=Forked)
    return _run_setup(setup, scaling_counts, baseline, None, on_step)


def _fits_before_simulating(setup: Setup) -> bool:
    """The plan fits in GPU and host memory: the step's result needs no what-if fix simulated."""
    return _fit_reason(setup.step.memory, setup.gpu.memory_bytes, setup.gpu) is None and host_fit_reason(setup) is None


def _rates_after_step(setup: Setup, baseline: bool, scaling_counts: list[int] | None) -> tuple:
    """`_scaling_rates` in the forked process as it would run here after the step: with the step
    charged to the answer budget first (here, playing the step charged it)."""
    charge(step_cost(setup.step))
    return _scaling_rates(setup, baseline, scaling_counts)


def _run_setup(setup: Setup, scaling_counts: list[int] | None, baseline: bool, rates, on_step,
               beside=None) -> StepResult:
    timeline = simulate_setup(setup, beside=beside)     # beside: the fast-forward's second play forked
    step = timeline.end_s
    training = setup.scenario.training
    model, gpu = setup.model, setup.gpu
    if training.tokens is not None and not model.tokens_per_sample:
        raise InputError("the model does not take tokens; give epochs and dataset_samples instead",
                         file=setup.file, key="training.tokens")
    cols = columns(timeline)        # read once, for the timeline plot (handed over first) and the breakdowns
    if on_step is not None:
        on_step(timeline, cols)
    per_rank, rank = rank_breakdowns(timeline, cols)    # the critical rank's breakdown, and every rank's busy fraction
    parts = replace(per_rank[rank], compute_slowed_by_comm=timeline.compute_slowdown_s.get(rank, 0.0))
    samples_per_s = training.global_batch / step
    tokens_per_s = samples_per_s * model.tokens_per_sample if model.tokens_per_sample else None
    flop_per_s_per_gpu = model.model_flop_per_sample * samples_per_s / setup.gpus
    memory = setup.step.memory
    capacity = gpu.memory_bytes
    reason = _fit_reason(memory, capacity, gpu)
    reason = _with_fixes(setup, reason) if reason is not None else _host_reason(setup)
    efficiency, scaling, skipped, reference = _scaling(setup, samples_per_s / setup.gpus, baseline, scaling_counts,
                                                       rates() if rates is not None else None)
    inputs, assumptions = run_inputs(setup, timeline, samples_per_s=samples_per_s, tokens_per_s=tokens_per_s,
                                     parts=per_rank)
    money = training_economics(inputs)
    return StepResult(
        scenario=setup.scenario.name, gpus=setup.gpus, gpu_name=gpu.name, fits=reason is None, reason=reason,
        memory_per_gpu_bytes=memory.total, memory_capacity_bytes=capacity, memory_reserved_bytes=memory.reserved,
        memory_breakdown=memory.as_dict(), step_time_s=step, breakdown=parts,
        samples_per_s=samples_per_s, tokens_per_s=tokens_per_s,
        tflops_per_gpu=flop_per_s_per_gpu / 1e12, mfu=flop_per_s_per_gpu / gpu.peak_flop_per_s(training.precision),
        scaling_efficiency=efficiency, scaling_reference_fits=reference and reference["fits"],
        scaling_reference_memory_bytes=reference and reference["memory_bytes"],
        time_to_train_s=money.time_to_train_s, cost_usd=money.cost_usd,
        energy_kwh=money.energy_kwh,
        plan={**_with_trainable(plan_summary(setup.plan), setup),
              **framework_summary(setup.scenario.training.framework, setup.scenario._framework_set)},
        scaling=scaling, scaling_skipped=skipped,
        timeline=timeline,
        economics={**money.as_json(), **_cost_basis(setup)},
        reliability=money.reliability.as_json() if money.reliability else {},
        assumptions=assumptions, inputs=inputs, slowest_gpu_factor=setup.plan.slowest_gpu_factor,
        fit_confidence=fit_confidence(memory.total, capacity) if reason is None or memory.total > capacity
        else "does_not_fit",
        host=host_causes(setup.step.program.tasks.get(rank, ()), setup.plan.cuda_graphs, setup.plan.fsdp_version,
                         eager_parts(model), graphs_blocked_by(setup.plan.zero, setup.plan.fsdp_version)),
    )


def _host_reason(setup: Setup) -> str | None:
    """Why the plan's offloaded state overflows the host's memory, with the changes that would fit."""
    reason = host_fit_reason(setup)
    if reason is not None:
        options = fit_options(setup, host_fit=host_fit_reason)
        if options:
            reason += "; " + describe(options, setup.gpus, setup.gpu.memory_bytes)
    return reason


def _with_fixes(setup: Setup, reason: str) -> str:
    """The GPU-memory reason, with the changes that would fit: one at a time, combined, more GPUs."""
    options = fit_options(setup, host_fit=host_fit_reason)
    combined = None if options else combined_option(setup)
    options = options or ([combined] if combined is not None else [])
    more = None if options else more_gpus_option(setup, host_fit_reason)
    return reason + "; " + describe(options, setup.gpus, setup.gpu.memory_bytes, more, len(setup.topology.gpus),
                                    most_sharded(setup))


def _scaling(setup: Setup, own_rate: float, baseline: bool, scaling_counts: list[int] | None,
             rates: tuple | None = None) -> tuple[float | None, list[dict], list[dict], dict | None]:
    """Scaling efficiency against one GPU, the weak-scaling curve at `scaling_counts` (each point
    with whether it would fit), the points the command's answer budget left out (scalesim/limits.py;
    each with the reason), and whether that 1-GPU reference would fit (`_reference`; None without one).
    `rates`: what `_scaling_rates` returns, when computed already."""
    single, others, skipped, references = rates if rates is not None else _scaling_rates(setup, baseline,
                                                                                         scaling_counts)
    references = {**references, setup.gpus: _reference(setup)}
    if setup.gpus == 1 and (baseline or scaling_counts):
        single = own_rate
    efficiency = own_rate / single if single else None
    known = {setup.gpus: own_rate, 1: single}      # simulated already: never twice
    others = iter(others)
    scaling = []
    for k in scaling_counts or []:
        if single is None:      # no baseline to compare with (over the budget): no curve
            continue
        rate = known[k] if k in known else next(others)
        if rate is not None:
            scaling.append({"gpus": k, "samples_per_gpu_per_s": rate, "scaling_efficiency": rate / single,
                            "fits": references.get(k, {}).get("fits")})
    return efficiency, scaling, skipped, references.get(1) if efficiency is not None else None


def _reference(point: Setup) -> dict:
    """Whether a point of the scaling curve (the 1-GPU reference of `scaling_efficiency` among them) would
    fit in GPU (and host) memory, and its GPU memory need: read from the memory model `prepare` ran for
    it (no second walk). A plan sharded over many GPUs is often compared with one that could not run
    (a 7B model under ZeRO-3 on 24 GiB cards)."""
    return {"fits": _fits_before_simulating(point), "memory_bytes": point.step.memory.total}


def _scaling_rates(setup: Setup, baseline: bool, scaling_counts: list[int] | None
                   ) -> tuple[float | None, list[float | None], list[dict], dict | None]:
    """The per-GPU rates `_scaling` compares the step's own with: the 1-GPU baseline (None when the
    step is on one GPU, or none is asked for, or it is over the budget), the curve's points at
    `scaling_counts` other than 1 and the step's own count, in order (none without a baseline),
    the points the answer budget left out, and each prepared point's `_reference` by GPU count."""
    skipped: list[dict] = []
    single, references = None, {}
    charge(_preparing_tasks(setup.gpus))        # the cluster built before the step (answer budget)
    if setup.gpus != 1 and (baseline or scaling_counts):
        # The baseline is part of the step's answer (TASKS_PER_SECOND was measured with it):
        # refused only when its step alone is over the budget; the curve's points get what is left.
        single = _budgeted_rate(setup, 1, skipped, charged=False, prepared=references)
    others = []
    if setup.gpus == 1 or single is not None:
        others = [_budgeted_rate(setup, k, skipped, prepared=references)
                  for k in scaling_counts or [] if k not in (1, setup.gpus)]
    return single, others, skipped, references


# What a run spends besides playing steps out, in the answer budget's units (limits.TASKS_PER_SECOND):
# building a cluster's graph and plan, ~1e-4 CPU s per GPU (measured 2026-12-03: 1.5 s at 16,384
# GPUs, 3.2 s at 32,768, 0.08 s at 1,024), and the imports and plots that follow the scaling curve,
# kept free when a point is planned (~0.7 s of imports and ~0.8 s of plots on the 16,384-GPU run).
PREPARE_SECONDS_PER_GPU = 1e-4
REPLY_SECONDS = 1.5


def _preparing_tasks(gpus: int) -> float:
    return PREPARE_SECONDS_PER_GPU * TASKS_PER_SECOND * gpus


def _budgeted_rate(setup: Setup, gpus: int, skipped: list[dict], charged: bool = True,
                   prepared: dict[int, dict] | None = None) -> float | None:
    """`per_gpu_rate` on `gpus` GPUs, or None with the reason in `skipped` when the command's answer
    budget has no room for it (`charged`: it must fit in what is left, its cluster's graph and the
    reply's REPLY_SECONDS included; else only on its own). `prepared[gpus]` gets the point's `_reference`."""
    try:
        point = scaling_point(setup, gpus)
        if point is not None and charged:
            check_affordable(step_cost(point.step) + _preparing_tasks(gpus) + REPLY_SECONDS * TASKS_PER_SECOND,
                             f"the scaling point on {gpus:,} GPUs")
            charge(_preparing_tasks(gpus))
    except OverBudget as exc:
        skipped.append({"gpus": gpus, "reason": exc.short(), "estimated_tasks": round(exc.tasks)})
        return None
    if point is not None and prepared is not None:
        prepared[gpus] = _reference(point)
    return None if point is None else _rate(point)
