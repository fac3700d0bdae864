"""When a plan does not fit: what takes the memory, and which changes would make it fit.

Each candidate change is a modified scenario whose memory is computed by the
same model (and whose step is simulated, to rank the candidates by what they
cost in time), so every suggestion is checked, not guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalesim.app.plans import (FINETUNE, OFFLOAD, RECOMPUTE, check_points, memory_headroom,
                                own_plan_point, plan_keys_cleared, recompute_keys_cleared, scenario_for, schedule_for,
                                search_points)
from scalesim.app.setup import Setup, prepare, step_time_of
from scalesim.errors import InputError
from scalesim.limits import OverBudget, check_affordable
from scalesim.parallel.size import compiled_tasks
from scalesim.parallel.bounds import fastest
from scalesim.scenario import fsdp_version_at, zero_stages
from scalesim.scenario.graphs import graphs_cleared
from scalesim.units import format_bytes, format_time


@dataclass(frozen=True, slots=True)
class FitOption:
    change: str                      # what to write in the scenario
    memory_bytes: float
    step_time_s: float | None
    note: str | None = None          # why the step was not simulated (over the answer budget)


def _candidates(setup) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    t, par = setup.scenario.training, setup.scenario.parallel
    pl = setup.plan.placement
    out: list[tuple[str, dict[str, dict[str, Any]]]] = []
    replicas = pl.dp * pl.cp
    for zero in zero_stages(t.framework, (1, 2, 3)):      # those its framework's code runs
        if zero > setup.plan.zero and replicas > 1:
            out.append((f"parallel.zero: {zero}", {"parallel": {"zero": zero}}))
    if par.offload_optimizer:
        out.append(("parallel.offload_optimizer: false", {"parallel": {"offload_optimizer": False}}))
    elif t.optimizer != "none":           # optimizer: none has no state to offload
        out.append(("parallel.offload_optimizer: true", {"parallel": {"offload_optimizer": True}}))
    if not par.offload_params:
        out.append(("parallel.offload_params: true", {"parallel": {"offload_params": True}}))
    if t.activation_checkpointing != "full":
        out.append(("training.activation_checkpointing: full", {"training": {"activation_checkpointing": "full"}}))
    if t.activation_checkpointing == "none":
        out.append(("training.activation_checkpointing: selective",
                    {"training": {"activation_checkpointing": "selective"}}))
    mb = t.micro_batch
    while mb > 1:
        mb //= 2
        out.append((f"training.micro_batch: {mb}", {"training": {"micro_batch": mb}}))
    heads = setup.model.heads or 0
    per_node = len(setup.topology.gpus) // max(1, setup.scenario.cluster.nodes)
    for tp in (2, 4, 8):
        if tp > pl.tp and heads and heads % tp == 0 and tp <= per_node and pl.dp % (tp // pl.tp) == 0:
            out.append((f"parallel.tp: {tp}", {"parallel": {"tp": tp, "dp": pl.dp * pl.tp // tp}}))
    return out


def _finetune_candidates(setup) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """LoRA / QLoRA, alone and with the memory savers people pair them with (full recompute;
    FSDP-sharded base; weights offloaded), only where training.finetune_allowed permits: they
    change what is trained, so the user must have said the model may be adapted instead."""
    t = setup.scenario.training
    order = ("none", "lora", "qlora")
    pl = setup.plan.placement
    out = []
    for method in ("lora", "qlora"):
        if method not in t.finetune_allowed or order.index(method) <= order.index(t.finetune):
            continue
        base = {"training": {"finetune": method}}
        out.append((f"training.finetune: {method}", base))
        full = {"training": {"finetune": method, "activation_checkpointing": "full"}}
        if t.activation_checkpointing != "full":
            out.append((f"training.finetune: {method} and training.activation_checkpointing: full", full))
        if pl.dp * pl.cp > 1 and setup.plan.zero < (top := most_sharded(setup)):
            out.append((f"training.finetune: {method}, parallel.zero: {top}, training.activation_checkpointing: full",
                        {**full, "parallel": {"zero": top}}))
        if not setup.scenario.parallel.offload_params:
            out.append((f"training.finetune: {method}, parallel.offload_params: true, "
                        f"training.activation_checkpointing: full", {**full, "parallel": {"offload_params": True}}))
    return out


def _fits(setup, memory_bytes: float, host_fit) -> bool:
    """The plan's GPU memory fits with the searches' headroom (training.memory_headroom), and so
    does its offloaded state on the host (when checked)."""
    return (memory_bytes * (1 + memory_headroom(setup.scenario)) <= setup.gpu.memory_bytes
            and (host_fit is None or host_fit(setup) is None))


def most_sharded(setup: Setup) -> int:
    """The highest ZeRO stage the scenario's framework runs (3; nanotron's 1): what the fixes shard with."""
    return max(zero_stages(setup.scenario.training.framework))


def fit_options(setup: Setup, limit: int = 4, host_fit=None) -> list[FitOption]:
    """Changes (one at a time, then the highest ZeRO stage the framework runs with full checkpointing) that make
    the plan fit, fastest first.

    `host_fit(setup)` returns why a plan's offloaded state overflows host memory
    (None when it fits); a change that fits the GPU but not the host is no answer.
    """
    candidates, top = _candidates(setup), most_sharded(setup)
    if (setup.plan.placement.dp * setup.plan.placement.cp > 1 and setup.plan.zero < top
            and setup.scenario.training.activation_checkpointing != "full"):      # (at `top` already: "full" alone)
        candidates.append((f"parallel.zero: {top} and training.activation_checkpointing: full",
                           {"parallel": {"zero": top}, "training": {"activation_checkpointing": "full"}}))
    candidates += _finetune_candidates(setup)
    found: list[tuple[str, Setup]] = []
    for change, sections in candidates:
        changed = _what_if(setup, sections)
        if changed is not None and _fits(changed, changed.step.memory.total, host_fit):
            found.append((change + _also_reset(setup, sections), changed))
    tried = found[: 2 * limit]
    # The `limit` fastest, skipping the simulation of options that cannot be among them; one rank
    # per pipeline stage (within 1% of every rank, tests/parallel): up to eight plans are timed here,
    # as many as the command's answer budget allows (scalesim/limits.py); the others say so.
    over: dict[int, str] = {}
    timed = fastest([s for _, s in tried], lambda s: _budgeted_step(s, over), limit)
    return [FitOption(tried[i][0], tried[i][1].step.memory.total, None if id(tried[i][1]) in over else step,
                      over.get(id(tried[i][1]))) for i, step in timed]


def _budgeted_step(setup: Setup, over: dict[int, str]) -> float:
    """A what-if's step (one rank per stage), or inf with the reason in `over` when the command's
    answer budget has no room for it."""
    try:
        check_affordable(compiled_tasks(setup.step, False), "a what-if plan")
    except OverBudget as exc:
        over[id(setup)] = exc.short()
        return math.inf
    return step_time_of(setup, True)


def _keys_that_go_with(setup: Setup, sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`sections` with the keys the changed plan no longer takes cleared: recompute_modules go with
    selective full training only, recompute_num_layers with full; the framework keys tied to one ZeRO
    stage, to tp > 1 or to virtual stages (plans.py plan_keys_cleared), CUDA graphs where the plan's ZeRO-3
    cannot run them (scenario/graphs.py). The schedule is the plan's, run
    as 1F1B where the changed split cannot fill its interleaved one (plans.py schedule_for, as searches do)."""
    scenario = setup.scenario
    training, parallel = sections.get("training", {}), sections.get("parallel", {})
    schedule = _schedule_of(setup, sections)
    checkpointing = training.get("activation_checkpointing", scenario.training.activation_checkpointing)
    finetune = training.get("finetune", scenario.training.finetune)
    cleared = plan_keys_cleared(parallel.get("zero", setup.plan.zero), parallel.get("tp", setup.plan.placement.tp),
                                setup.plan.chunks_per_stage > 1 and not schedule,
                                parallel.get("pp", setup.plan.placement.pp))
    zero = parallel.get("zero", setup.plan.zero)
    graphs = graphs_cleared(zero, parallel.get("fsdp_version", fsdp_version_at(scenario, zero)))     # scenario/graphs.py
    return {**sections, "training": {**recompute_keys_cleared(checkpointing, finetune), **graphs, **training},
            "parallel": {**schedule, **cleared, **parallel}}


def _schedule_of(setup: Setup, sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The pipeline-schedule keys the plan changed by `sections` runs with: {} for the plan's own, 1F1B
    where its interleaved schedule cannot run the changed split (plans.py schedule_for)."""
    try:
        changed = setup.scenario.with_changes(**sections)
    except (InputError, ValueError):
        return {}
    point = own_plan_point(changed, sections.get("cluster", {}).get("gpus", setup.gpus))
    return {} if isinstance(point, str) else schedule_for(changed, point)


def _also_reset(setup: Setup, sections: dict[str, dict[str, Any]]) -> str:
    """', section.key: value' for each key `_keys_that_go_with` resets beyond `sections` that the scenario
    sets otherwise: what the user must write too for the suggested plan to be the one checked."""
    scenario = setup.scenario
    out = ""
    for section, keys in _keys_that_go_with(setup, sections).items():
        for key, value in keys.items():
            if key not in sections.get(section, {}) and getattr(getattr(scenario, section), key) != value:
                shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
                out += f", {section}.{key}: {shown}"
    return out


def _what_if(setup: Setup, sections: dict[str, dict[str, Any]]) -> Setup | None:
    """The plan with `sections` changed, prepared as this run's (its catalog, its caches);
    None when that plan cannot be formed."""
    try:
        return prepare(setup.scenario.with_changes(**_keys_that_go_with(setup, sections)), setup.file,
                       catalog=setup.catalog,
                       caches=setup.caches)
    except (InputError, ValueError):
        return None


def more_gpus_option(setup: Setup, host_fit=None) -> FitOption | None:
    """The fewest of the cluster's GPUs (doubling) that hold the model with the highest ZeRO stage its framework
    runs (`most_sharded`), full recompute and micro-batch 1 (then also with the optimizer offloaded); None if none do.

    The global batch grows to one sample per data-parallel rank where it was smaller.
    """
    t, par = setup.scenario.training, setup.scenario.parallel
    model_parallel = par.tp * par.pp * par.cp
    available = len(setup.topology.gpus)
    gpus, top = setup.gpus * 2, most_sharded(setup)
    while gpus <= available:
        dp = gpus // model_parallel
        if gpus % model_parallel == 0 and dp > 1:
            batch = -(-max(t.global_batch, dp) // dp) * dp
            for offload in (False, True):
                sections = {"cluster": {"gpus": gpus},
                            "parallel": {"zero": top, "offload_optimizer": offload or par.offload_optimizer,
                                         **({"dp": dp} if par.dp is not None else {})},
                            "training": {"micro_batch": 1, "global_batch": batch, "activation_checkpointing": "full"}}
                changed = _what_if(setup, sections)
                if changed is None:
                    continue
                memory = changed.step.memory.total
                if _fits(changed, memory, host_fit):
                    change = (f"cluster.gpus: {gpus} with parallel.zero: {top}"
                              + (", parallel.offload_optimizer: true" if offload else "")
                              + ", training.activation_checkpointing: full, training.micro_batch: 1"
                              + (f", training.global_batch: {batch}" if batch != t.global_batch else "")
                              + _also_reset(setup, sections))
                    note = _over_budget(changed, False)
                    return FitOption(change, memory, None if note else step_time_of(changed, True), note)
        gpus *= 2
    return None


def describe(options: list[FitOption], gpus: int, capacity: float, more: FitOption | None = None,
             available: int | None = None, zero: int = 3) -> str:
    """What would fit, in words (`zero`: the highest ZeRO stage the framework runs, `most_sharded`)."""
    if not options:
        tried = (f"no single change tried fits in {format_bytes(capacity)} (ZeRO, optimizer offload, recompute, "
                 f"smaller micro-batch, more tensor parallelism, weight offload)")
        if more is not None:
            return f"{tried}; more GPUs would: {more.change} ({format_bytes(more.memory_bytes)}, {_step_text(more)})"
        within = ("" if available is None or available <= gpus
                  else f", not even all {available} GPUs of the cluster with ZeRO-{zero}")
        return f"{tried}{within}; more nodes or a GPU with more memory is needed"
    return "would fit: " + "; ".join(f"{o.change} ({format_bytes(o.memory_bytes)}, {_step_text(o)})" for o in options)


def _step_text(option: FitOption) -> str:
    return f"step {format_time(option.step_time_s)}" if option.note is None else f"step not simulated: {option.note}"


def combined_option(setup: Setup) -> FitOption | None:
    """When no single change fits: the combination of ZeRO stage, offload (optimizer, then weights),
    recompute, a smaller micro-batch and (where training.finetune_allowed permits) adapters, at the
    plan's own split, that fits with the least of those changes; None if none does.

    The combinations are the `sweep --search` plans of this split, checked by the same memory
    pass (no simulation but of the one chosen), so run and the search agree on what fits.
    """
    base, gpus = setup.scenario, setup.gpus
    own = own_plan_point(base, gpus)
    if isinstance(own, str):
        return None
    points = [p for p in search_points(base, gpus, setup.file, setup.catalog)[0]
              if (p.dp, p.tp, p.pp, p.cp) == (own.dp, own.tp, own.pp, own.cp) and p.micro_batch <= own.micro_batch]
    rows = check_points(points, base, setup.file, {gpus: base}, catalog=setup.catalog, caches=setup.caches)
    fitting = [p for p, r in zip(points, rows) if r["status"] == "ok"]
    if not fitting:
        return None
    best = min(fitting, key=lambda p: (FINETUNE.index(p.finetune), OFFLOAD.index(p.offload),
                                       RECOMPUTE.index(p.recompute), p.zero, -p.micro_batch))
    changed = prepare(scenario_for(base, best, setup.file, base), setup.file, catalog=setup.catalog,
                      caches=setup.caches)
    memory = next(r for p, r in zip(points, rows) if p == best)["memory_per_gpu_bytes"]
    note = _over_budget(changed, changed.step.every_rank)
    return FitOption(_change_text(own, best), memory, None if note else step_time_of(changed), note)


def _over_budget(setup: Setup, every_rank: bool) -> str | None:
    """Why the command's answer budget has no room for simulating `setup` (None: it has)."""
    try:
        check_affordable(compiled_tasks(setup.step, every_rank), "a what-if plan")
    except OverBudget as exc:
        return exc.short()
    return None


def _change_text(own, new) -> str:
    """The scenario keys that turn plan `own` into plan `new`."""
    parts = []
    if new.zero != own.zero:
        parts.append(f"parallel.zero: {new.zero}")
    if new.offload != own.offload:
        parts.append("parallel.offload_optimizer: true")
        if new.offload == "params":
            parts.append("parallel.offload_params: true")
    if new.recompute != own.recompute:
        parts.append(f"training.activation_checkpointing: {new.recompute}")
    if new.micro_batch != own.micro_batch:
        parts.append(f"training.micro_batch: {new.micro_batch}")
    if new.finetune != own.finetune:
        parts.append(f"training.finetune: {new.finetune}")
    return ", ".join(parts)
