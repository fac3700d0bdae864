"""The plans a search tries, and which of them fit: enumerate, then check memory (no simulation).

See `scalesim.app.sweep` for the whole search: these are its first steps, which `run`'s
fixes share (scalesim/app/fitting.py), so whatever `run` suggests the search finds too.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pydantic

from scalesim.app.caches import Caches
from scalesim.app.plan_checks import interleaved
from scalesim.app.setup import host_fit_reason, prepare
from scalesim.costs.memory import MEMORY_MODEL_ERROR_FRACTION
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import PLAN_CHECK_SECONDS, OverBudget, charge, check_affordable, check_cluster_size, checks_cost
from scalesim.models import get_model
from scalesim.parallel.size import step_cost
from scalesim.parallel.step import pipeline_runs
from scalesim.scenario import Scenario, graphs_cleared, zero_stages
from scalesim.topology import load_node_design

RECOMPUTE = ("none", "selective", "full")
RECOMPUTE_MEMORY = ("full", "selective", "none")       # least activation memory first
ZERO_STAGES = (0, 1, 2, 3)
# What the plan moves to host memory, least first: nothing, the optimizer state (ZeRO-Offload),
# also the weights (parallel.offload_params, ZeRO-Infinity style). Each saves GPU memory and costs
# PCIe traffic, so a plan offloads only when the same plan offloading less does not fit.
OFFLOAD = ("none", "optimizer", "params")
# What is trained, most first: the search proposes LoRA / QLoRA only where training.finetune_allowed
# permits, and only for plans whose full training does not fit (they change the work).
FINETUNE = ("none", "lora", "qlora")
MAX_MICRO_BATCH = 64
@dataclass(frozen=True, slots=True)
class PlanPoint:
    """One parallel plan at one GPU count."""

    gpus: int
    dp: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    micro_batch: int = 1
    recompute: str = "none"
    offload: str = "none"
    finetune: str = "none"

    @property
    def label(self) -> str:
        parts = [f"dp{self.dp}"] + [f"{k}{v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("cp", self.cp))
                                    if v > 1]
        parts += [f"zero{self.zero}"] if self.zero else []
        parts += [f"mb{self.micro_batch}"] + ([f"rc-{self.recompute}"] if self.recompute != "none" else [])
        parts += {"none": [], "optimizer": ["offload-opt"], "params": ["offload-weights"]}[self.offload]
        parts += [] if self.finetune == "none" else [self.finetune]
        return " ".join(parts)

    def lighter(self) -> "PlanPoint | None":
        """The same plan offloading one step less, or else fully training instead of adapting
        (None for a plan with neither): the plan this one is only worth trying when that one does
        not fit."""
        if self.offload != "none":
            return replace(self, offload=OFFLOAD[OFFLOAD.index(self.offload) - 1])
        if self.finetune != "none":
            return replace(self, finetune=FINETUNE[FINETUNE.index(self.finetune) - 1])
        return None


Progress = Callable[[Iterable, str, int], Iterable]


def _plain(items: Iterable, _description: str, _total: int) -> Iterable:
    return items


def _powers_of_two(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def cluster_for(base: Scenario, gpus: int, file: str | None = None, catalog: Catalog | None = None
                ) -> tuple[Scenario, list[str]]:
    """The scenario's cluster grown (or shrunk) to `gpus` GPUs, and notes on defaults used."""
    design = load_node_design(base.cluster.node, key="cluster.node", file=file, catalog=catalog)
    nodes = math.ceil(gpus / design.gpus)
    try:
        check_cluster_size(nodes, design.gpus)
    except InputError as exc:
        raise InputError(f"{gpus:,} GPUs: {exc.detail}", file=file, key="--gpus") from None
    changes: dict = {"nodes": nodes, "gpus": gpus}
    notes = []
    if nodes > 1 and base.cluster.fabric is None:
        if not design.nics.count or not isinstance(design.nics.link, str):
            raise InputError(f"{gpus} GPUs need {nodes} nodes of {design.name}, which has no NICs named by a catalog "
                             "link to join them; add cluster.fabric (e.g. {link: ib-ndr, nics_per_node: 8})",
                             file=file, key="cluster.fabric")
        kind = "rail-optimized" if design.nics.count >= design.gpus else "fat-tree"
        changes["fabric"] = {"link": design.nics.link, "nics_per_node": design.nics.count, "topology": kind}
        notes.append(f"the scenario has no cluster.fabric: from {nodes} nodes on, the nodes are joined by the "
                     f"design's own NICs ({design.nics.count} x {design.nics.link} per node, {kind}); "
                     "set cluster.fabric to choose")
    return base.with_changes(cluster=changes), notes


def scenario_for(base: Scenario, point: PlanPoint, file: str | None = None, grown: Scenario | None = None
                 ) -> Scenario:
    """The scenario of one plan point (`grown`: the base already grown to the point's GPU count)."""
    if grown is None:
        grown, _ = cluster_for(base, point.gpus, file)
    offload = {} if point.offload == "none" and point.finetune == "none" else {
        # optimizer: none has no state to offload (the point then offloads nothing more than its lighter one)
        "offload_optimizer": (point.offload != "none" or base.parallel.offload_optimizer)
        and base.training.optimizer != "none",
        "offload_params": point.offload == "params" or base.parallel.offload_params}
    finetune = {} if point.finetune == "none" else {"finetune": point.finetune}
    schedule = schedule_for(base, point)
    # The scenario's pipeline layout belongs to its own split: other splits get the even one.
    layout = {} if point.pp == base.parallel.pp and not schedule else {
        "pipeline_layout": None, "decoder_first_pipeline_num_layers": None, "decoder_last_pipeline_num_layers": None}
    return grown.with_changes(
        parallel={"dp": point.dp, "tp": point.tp, "pp": point.pp, "cp": point.cp, "zero": point.zero,
                  **schedule, **offload, **layout, "hsdp_shard": None,     # HSDP: the scenario's own plan only
                  **plan_keys_cleared(point.zero, point.tp, interleaved(base.parallel) and not schedule, point.pp)},
        training={"micro_batch": point.micro_batch, "activation_checkpointing": point.recompute, **finetune,
                  **recompute_keys_cleared(point.recompute, point.finetune),
                  **graphs_cleared(point.zero, base.parallel.fsdp_version if point.zero == 3 else None)})


def plan_keys_cleared(zero: int, tp: int, virtual: bool, pp: int) -> dict:
    """The scenario's framework keys a plan with this ZeRO stage, TP degree, schedule (`virtual`:
    interleaved with virtual stages) and pipeline no longer takes, reset: FSDP's kernels and prefetch go
    with ZeRO-3 (keeping its last block gathered with ZeRO-3 and pp 1),
    nanotron's DDP with ZeRO-1, Megatron-Core's parameter gathers with the optimizer step with ZeRO-1/2
    and virtual stages, its aligned gathers with ZeRO-1/2, its DP buckets and their NaN check with
    ZeRO 0-2, saving the gathered input with tp > 1."""
    return {**({} if zero == 3 else {"fsdp_version": None, "fsdp_backward_prefetch": None,
                                     "fsdp_keep_last_block": False}),
            **({} if pp == 1 else {"fsdp_keep_last_block": False}),
            **({} if zero == 1 else {"zero1_over_ddp": False}),
            **({} if zero in (1, 2) else {"param_gather_with_optimizer_step": False, "align_param_gather": False}),
            **({} if virtual else {"param_gather_with_optimizer_step": False}),
            **({} if zero < 3 else {"bucket_params": None, "grad_nan_check": False}),
            **({} if tp > 1 else {"tp_recompute_allgather": True})}


def recompute_keys_cleared(checkpointing: str, finetune: str) -> dict[str, None]:
    """The scenario's recompute keys a plan with this checkpointing and fine-tuning no longer takes,
    cleared: partial recompute (recompute_num_layers) goes with full checkpointing only, recompute
    modules with selective checkpointing of full training only."""
    return {**({} if checkpointing == "full" else {"recompute_num_layers": None}),
            **({} if checkpointing == "selective" and finetune == "none" else {"recompute_modules": None})}


INTERLEAVED_FALLBACK_NOTE = ("plans the scenario's interleaved schedule cannot run (pp = 1, fewer layers than "
                             "pp x virtual_stages, micro-batches not a multiple of pp) run 1F1B instead")


def schedule_for(base: Scenario, point: PlanPoint) -> dict:
    """The scenario's pipeline schedule, or 1F1B where its interleaved schedule cannot run this plan.

    The schedule is part of the recipe, not of the split being searched: a split
    the interleaved schedule cannot fill is still worth trying the way Megatron
    would run it without virtual stages.
    """
    par = base.parallel
    if par.pp_schedule != "interleaved":
        return {}
    micro_batches = base.training.global_batch // max(1, point.dp * point.micro_batch)
    if point.pp > 1 and pipeline_runs(get_model(base.model, seq_len=base.training.seq_len), "interleaved",
                                      point.pp, par.virtual_stages, micro_batches):
        return {}
    return {"pp_schedule": "1f1b", "virtual_stages": 1}


def own_plan_point(base: Scenario, gpus: int) -> PlanPoint | str:
    """The scenario's plan at `gpus` GPUs, or why it cannot be formed."""
    par, training = base.parallel, base.training
    split = par.tp * par.pp * par.cp
    if gpus % split:
        return f"{gpus} GPUs do not divide into tp x pp x cp = {split}"
    dp = gpus // split
    if training.global_batch % dp:
        return f"global_batch ({training.global_batch}) is not a multiple of dp ({dp})"
    per_replica = training.global_batch // dp
    mb = min(training.micro_batch, per_replica)
    while per_replica % mb:
        mb -= 1
    offload = "params" if par.offload_params else "optimizer" if par.offload_optimizer else "none"
    return PlanPoint(gpus, dp, par.tp, par.pp, par.cp, par.zero, mb, training.activation_checkpointing, offload,
                     training.finetune)


def search_points(base: Scenario, gpus: int, file: str | None = None, catalog: Catalog | None = None
                  ) -> tuple[list[PlanPoint], list[dict]]:
    """Every plan worth trying at `gpus` GPUs; and rows for splits the batch rules out."""
    design = load_node_design(base.cluster.node, key="cluster.node", file=file, catalog=catalog)
    model = get_model(base.model, seq_len=base.training.seq_len, key="model", file=file)
    heads = model.heads
    layers = model.num_layers or len(model.layers)
    batch = base.training.global_batch
    cp = base.parallel.cp
    points, skipped = [], []
    for tp in _powers_of_two(min(design.gpus, gpus)):
        if heads and heads % tp:
            continue
        for pp in _powers_of_two(min(layers, gpus // tp)):
            if gpus % (tp * pp * cp):
                continue
            dp = gpus // (tp * pp * cp)
            if batch % dp:
                skipped.append(_row(PlanPoint(gpus, dp, tp, pp, cp), "not_available",
                                    f"global_batch ({batch}) is not a multiple of dp ({dp})"))
                continue
            per_replica = batch // dp
            micro = [m for m in _powers_of_two(min(per_replica, MAX_MICRO_BATCH)) if per_replica % m == 0]
            for zero in zero_stages(base.training.framework, ZERO_STAGES) if dp > 1 else (0,):   # its code's
                for mb in micro:
                    for recompute in RECOMPUTE:
                        for offload, finetune in _memory_savers(base):
                            points.append(PlanPoint(gpus, dp, tp, pp, cp, zero, mb, recompute, offload, finetune))
    return points, skipped


def _memory_savers(base: Scenario) -> list[tuple[str, str]]:
    """(offload, finetune) pairs the search tries: every offload, and the scenario's own fine-tuning
    or the adapters training.finetune_allowed permits (never less adaptation than the scenario's)."""
    t = base.training
    own = FINETUNE.index(t.finetune)
    methods = [m for m in FINETUNE if FINETUNE.index(m) == own or (FINETUNE.index(m) > own and m in t.finetune_allowed)]
    return [(offload, method) for method in methods for offload in OFFLOAD]


def _row(point: PlanPoint, status: str, reason: str | None = None, **values) -> dict:
    # the point's fields as asdict gives them (all plain values: no deep copy needed, a row per plan searched)
    row = {**{f.name: getattr(point, f.name) for f in fields(point)}, "plan": point.label, "status": status,
           "reason": reason}
    row["fits"] = status in ("ok", "dominated")
    for key in ("nodes", "memory_per_gpu_bytes", "memory_capacity_bytes", "step_time_s", "samples_per_s",
                "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "exposed_comm_s", "bubble_s",
                "time_to_train_s", "cost_usd", "on_prem_cost_usd", "energy_kwh", "goodput"):
        row[key] = values.get(key)
    return row


def _why(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return exc.detail if not exc.key else f"{exc.key}: {exc.detail}"
    err = exc.errors()[0]       # pydantic.ValidationError
    return f"{'.'.join(map(str, err['loc']))}: {err['msg']}"


def refused_row(point: PlanPoint, exc: Exception) -> dict:
    """The not_available row of a plan the simulator refuses; over the answer budget, the row
    says so with its estimated tasks (scalesim/limits.py)."""
    if isinstance(exc, OverBudget):
        return {**_row(point, "not_available", exc.short()), "estimated_tasks": round(exc.tasks)}
    return _row(point, "not_available", _why(exc))


def _failure(exc: BaseException) -> str:
    """'Type: message (at file.py:line)' of an unexpected exception: the same on every executor."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def check_point(point: PlanPoint, base: Scenario, file: str | None = None, grown: Scenario | None = None,
                catalog: Catalog | None = None, caches: Caches | None = None, tasks: dict | None = None) -> dict:
    """Can the plan run, and does it fit? No simulation. `tasks`: where to put the estimated simulated
    tasks (scalesim/parallel/size.py) of a plan that fits (only those are simulated), by point."""
    try:
        setup = prepare(scenario_for(base, point, file, grown), file, catalog=catalog, caches=caches)
        memory = setup.step.memory
    except (InputError, pydantic.ValidationError) as exc:
        return refused_row(point, exc)
    except Exception as exc:       # noqa: BLE001 - a bug, recorded on its row (module docstring)
        return _row(point, "failed", _failure(exc))
    capacity = setup.gpu.memory_bytes
    nodes = setup.scenario.cluster.nodes
    headroom = memory_headroom(base)
    if memory.total * (1 + headroom) > capacity:
        margin = "" if memory.total > capacity else f" with the {headroom:.0%} memory headroom (training.memory_headroom)"
        return _row(point, "does_not_fit", f"needs {memory.total / 2**30:.1f} GiB per GPU of "
                    f"{capacity / 2**30:.1f} GiB{margin}", nodes=nodes, memory_per_gpu_bytes=memory.total,
                    memory_capacity_bytes=capacity)
    host = host_fit_reason(setup)
    if host is not None:
        return _row(point, "does_not_fit", host, nodes=nodes, memory_per_gpu_bytes=memory.total,
                    memory_capacity_bytes=capacity)
    if tasks is not None:
        try:
            tasks[point] = step_cost(setup.step)
        except Exception as exc:       # noqa: BLE001 - a bug, recorded on its row
            return _row(point, "failed", _failure(exc))
    return _row(point, "ok", None, nodes=nodes, memory_per_gpu_bytes=memory.total, memory_capacity_bytes=capacity)


def memory_headroom(scenario: Scenario) -> float:
    """The share of a plan's need the searches keep free: training.memory_headroom, or the memory
    model's measured error."""
    own = scenario.training.memory_headroom
    return MEMORY_MODEL_ERROR_FRACTION if own is None else own


def _needs_no_more_memory(q: PlanPoint, p: PlanPoint) -> bool:
    """Whether plan q needs at most p's memory: same split, micro-batch no larger, recompute no
    lighter, ZeRO stage, offload and adaptation no lower (activations grow with the micro-batch,
    also with a pipeline's in-flight micro-batches; recompute, ZeRO, offload and adapters only
    ever remove memory)."""
    return ((q.gpus, q.dp, q.tp, q.pp, q.cp) == (p.gpus, p.dp, p.tp, p.pp, p.cp) and q.micro_batch <= p.micro_batch
            and RECOMPUTE_MEMORY.index(q.recompute) <= RECOMPUTE_MEMORY.index(p.recompute) and q.zero >= p.zero
            and OFFLOAD.index(q.offload) >= OFFLOAD.index(p.offload)
            and FINETUNE.index(q.finetune) >= FINETUNE.index(p.finetune))


def check_points(points: list[PlanPoint], base: Scenario, file: str | None, grown: dict[int, Scenario],
                 progress: Progress | None = None, catalog: Catalog | None = None,
                 caches: Caches | None = None, tasks: dict | None = None) -> list[dict]:
    """`check_point` for every point (rows in the points' order), skipping the check of any plan
    that needs at least the memory of one that already does not fit, and of any plan that offloads
    or adapts when the same plan doing less of that fits (memory first: no simulation here);
    `tasks` gets the estimated simulated tasks of every plan checked."""
    order = sorted(range(len(points)), key=lambda i: (FINETUNE.index(points[i].finetune),
                                                        OFFLOAD.index(points[i].offload),
                                                        points[i].gpus, points[i].tp, points[i].pp,
                                                        points[i].micro_batch,
                                                        RECOMPUTE_MEMORY.index(points[i].recompute),
                                                        -points[i].zero))
    index = {p: i for i, p in enumerate(points)}
    rows: dict[int, dict] = {}
    too_big: dict[tuple, list[PlanPoint]] = {}
    for i in (progress or _plain)(order, "checking plans", len(order)):
        p = points[i]
        split = (p.gpus, p.dp, p.tp, p.pp, p.cp)
        lighter = p.lighter()
        if lighter in index and rows.get(index[lighter], {}).get("status") in ("ok", "dominated"):
            rows[i] = _row(p, "dominated", f"{lighter.label} fits: "
                           + ("no need to offload" if p.offload != "none" else "no need to adapt instead of training"))
            continue
        smaller = next((q for q in too_big.get(split, []) if _needs_no_more_memory(q, p)), None)
        if smaller is not None:
            rows[i] = _row(p, "does_not_fit", f"needs at least the memory of {smaller.label}, which does not fit")
            continue
        rows[i] = check_point(p, base, file, grown.get(p.gpus), catalog, caches, tasks)
        if rows[i]["status"] == "does_not_fit":
            too_big.setdefault(split, []).append(p)
    return [rows[i] for i in range(len(points))]


def charge_checks(plans: int, search: bool, counts: int) -> None:
    """Checking each plan's memory costs about PLAN_CHECK_SECONDS: refused (exit 2) when that alone
    is beyond the answer budget, else charged to it."""
    work = checks_cost(plans)
    check_affordable(work, f"checking the memory of {plans:,} plans ({counts} GPU count{'s' if counts != 1 else ''}"
                     f"{', --search' if search else ''}), about {plans * PLAN_CHECK_SECONDS:,.0f} s",
                     key="--search" if search else "--gpus", fix="fewer GPU counts (--gpus), or ")
    charge(work)


@dataclass(frozen=True)
class SweepBudget:
    """The plans' estimated simulated tasks (scalesim/parallel/size.py), held against the answer
    budget (scalesim/limits.py: SWEEP_SECONDS or --max-seconds; none in the library)."""

    tasks: dict[PlanPoint, float]
    search: bool
    counts: int

    def refuse_over(self, pending: list[PlanPoint]) -> None:
        """Refuse (OverBudget, exit 2) plans to simulate whose estimated work, together, is over
        what is left of the budget; else charge it."""
        work = sum(self.tasks.get(p, 0.0) for p in pending)
        what = (f"the sweep's {len(pending):,} plan{'s' if len(pending) != 1 else ''} to simulate "
                f"({self.counts} GPU count{'s' if self.counts != 1 else ''}{', --search' if self.search else ''})")
        check_affordable(work, what, key="--search" if self.search else "--gpus",
                         fix="fewer GPU counts (--gpus), or " if not self.search else
                         "fewer GPU counts (--gpus), the pruned search (no --exhaustive), or ")
        charge(work)

    def admit(self, point: PlanPoint) -> dict | None:
        """None, the plan's work charged, when what is left of the budget has room for it; else
        its `not_available` row saying so (with `estimated_tasks`)."""
        work = self.tasks.get(point, 0.0)
        try:
            check_affordable(work, "a plan of the search")
        except OverBudget as exc:
            return refused_row(point, exc)
        charge(work)
        return None
