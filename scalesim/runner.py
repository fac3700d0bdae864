"""From a scenario to a result: resolve names, check the plan, build, simulate, summarise.

This is the only place that wires the layers together (the CLI calls it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from scalesim.costs.compute import ELEMENT_BYTES, FLASH_KINDS, flash_efficiency
from scalesim.costs.eager import eager_model
from scalesim.costs.economics import training_economics
from scalesim.costs.finetune import finetune_memory, finetune_spec, host_weight_bytes, trainable_params
from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.costs.memory import MemoryBreakdown, fit_confidence, model_boundary_bytes, training_memory
from scalesim.costs.variability import slowest_gpu_factor
from scalesim.engine import Timeline, simulate
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import check_step_size, estimated_tasks, time_limit
from scalesim.models import ModelSpec, get_model
from scalesim.parallel.builder import ParallelPlan, build_program
from scalesim.parallel.experts import (default_imbalance, expert_groups, experts_whole, rank_load_factor,
                                      shard_experts)
from scalesim.parallel.placement import Placement
from scalesim.parallel.schedules import in_flight, schedule
from scalesim.parallel.sharding import shard_layer
from scalesim.parallel.size import step_counts
from scalesim.parallel.stages import model_chunks
from scalesim.result import StepResult, breakdown, critical_rank
from scalesim.scenario import Scenario, resolved_attention
from scalesim.topology import Fabric, Topology, cached_cluster, load_node_design
from scalesim.units import format_bytes


@dataclass(frozen=True)
class Setup:
    """A scenario with every name resolved and its plan checked."""

    scenario: Scenario
    file: str | None
    model: ModelSpec
    topology: Topology
    gpu: GpuSpec
    gpus: int
    plan: ParallelPlan
    host_memory_bytes: float | None = None      # per node, from the design's host.memory_gb
    catalog: Catalog | None = None              # where its GPU and link names resolved [built-in]


# Each micro-batch of a step is simulated as its own tasks (about 1,000 micro-batches a
# second on one core for an 8-GPU data-parallel step); real recipes use tens to a few
# hundred. Beyond this a typo (a global batch in tokens, say) would run for hours or
# exhaust memory instead of failing.
MAX_MICRO_BATCHES = 4096


def _check_plan(scenario: Scenario, model: ModelSpec, count: int, dp: int, file: str | None) -> None:
    """Refuse plans Megatron/DeepSpeed would refuse, naming the key and what would work."""
    par, training = scenario.parallel, scenario.training

    def bad(key: str, message: str) -> InputError:
        return InputError(message, file=file, key=key)

    if dp * par.tp * par.pp * par.cp != count:
        raise bad("parallel.dp", f"dp x tp x pp x cp = {dp} x {par.tp} x {par.pp} x {par.cp} = "
                  f"{dp * par.tp * par.pp * par.cp}, but the scenario has {count} GPUs; they must be equal")
    model_parallel = par.tp > 1 or par.pp > 1 or par.cp > 1
    if model_parallel and not model.num_layers or model_parallel and model.tokens_per_sample is None:
        raise bad("parallel", f"tensor, pipeline and context parallelism need a token transformer; "
                  f"{model.name} is a vision model: use dp (and zero) only")
    if model.heads and model.heads % par.tp:
        raise bad("parallel.tp", f"tp ({par.tp}) must divide the attention heads ({model.heads}); "
                  f"allowed: {', '.join(str(t) for t in range(1, model.heads + 1) if model.heads % t == 0 and t <= 64)}")
    if model.kv_heads and model.kv_heads % par.tp and par.tp % model.kv_heads:
        raise bad("parallel.tp", f"tp ({par.tp}) and the key/value heads ({model.kv_heads}) must divide one another")
    _check_experts(scenario, model, dp, file)
    if par.virtual_stages > 1 and par.pp_schedule != "interleaved":
        raise bad("parallel.virtual_stages", "virtual_stages > 1 needs pp_schedule: interleaved")
    if par.pp_schedule == "interleaved" and par.pp == 1:
        raise bad("parallel.pp_schedule", "the interleaved schedule needs pp > 1")
    if par.cp > 1 and model.tokens_per_sample % (2 * par.cp):
        raise bad("parallel.cp", f"seq_len ({model.tokens_per_sample}) must be a multiple of 2 x cp "
                  f"({2 * par.cp}): context parallelism splits each sequence into 2 x cp chunks")
    per_step = dp * training.micro_batch
    if training.global_batch % per_step:
        raise bad("training.global_batch", f"global_batch ({training.global_batch}) must be a multiple of "
                  f"dp x micro_batch ({dp} x {training.micro_batch} = {per_step})")
    micro_batches = training.global_batch // per_step
    if micro_batches > MAX_MICRO_BATCHES:
        raise bad("training.global_batch", f"global_batch ({training.global_batch:,}) makes {micro_batches:,} "
                  f"micro-batches per step on each data-parallel replica (global_batch / (dp x micro_batch)); "
                  f"scalesim plays out every one, so at most {MAX_MICRO_BATCHES:,} are allowed: raise "
                  f"training.micro_batch or lower training.global_batch")


def _check_experts(scenario: Scenario, model: ModelSpec, dp: int, file: str | None) -> None:
    """Expert parallelism needs an MoE model, and ep must divide the experts and dp x cp."""
    ep, cp, tp, etp = scenario.parallel.ep, scenario.parallel.cp, scenario.parallel.tp, scenario.parallel.etp
    if etp is not None and etp not in (1, tp):
        raise InputError(f"etp ({etp}) must be 1 (experts whole) or tp ({tp}); allowed: 1, {tp}",
                         file=file, key="parallel.etp")
    data = dp * cp * (tp if etp == 1 else 1)
    if ep == 1:
        return
    if model.moe is None:
        raise InputError(f"ep ({ep}) splits the experts of a mixture-of-experts model; {model.name} has none: "
                         f"allowed: 1", file=file, key="parallel.ep")
    experts = model.moe.experts
    allowed = [e for e in range(1, experts + 1) if experts % e == 0 and data % e == 0]
    what = f"dp x cp{' x tp' if etp == 1 else ''} = {data}"
    if experts % ep or data % ep:
        raise InputError(f"ep ({ep}) must divide the experts ({experts}) and {what}; "
                         f"allowed: {', '.join(map(str, allowed))}", file=file, key="parallel.ep")


def moe_imbalance(scenario: Scenario, model: ModelSpec) -> float:
    """The scenario's busiest-expert / mean load, or the router's published default."""
    if model.moe is None:
        return 1.0
    given = scenario.training.moe_imbalance
    return default_imbalance(model.moe) if given is None else given


def autocast_style(precision: str, par) -> bool:
    """Plain data parallelism in 16-bit or fp8 is taken to be PyTorch autocast: fp32 weights and gradients.

    Not with ZeRO-Offload: DeepSpeed keeps 16-bit weights on the GPU and fp32 masters on the host.
    """
    return (precision in ("fp16", "bf16", "fp8") and par.zero == 0 and par.tp == par.pp == par.cp == 1
            and not par.offload_optimizer and not par.offload_params)


def grad_reduce_dtype(precision: str, par) -> str:
    """The scenario's gradient reduction precision, `auto` resolved (see ParallelSpec)."""
    if par.grad_reduce_dtype != "auto":
        return par.grad_reduce_dtype
    if precision in ("fp32", "tf32") or autocast_style(precision, par):
        return "fp32"
    return "bf16" if precision == "fp8" else precision


def prepare(scenario: Scenario, file: str | None = None, *, gpus: int | None = None,
            catalog: Catalog | None = None) -> Setup:
    """Resolve catalog names (in `catalog`, [the built-in one]) and check the parallel plan;
    `gpus` overrides the count (dp follows)."""
    design = load_node_design(scenario.cluster.node, key="cluster.node", file=file, catalog=catalog)
    fabric = scenario.cluster.fabric
    try:
        topology = cached_cluster(design, nodes=scenario.cluster.nodes, fabric=None if fabric is None else Fabric(
            fabric.link, fabric.nics_per_node, fabric.topology, fabric.oversubscription), catalog=catalog)
    except InputError as exc:
        inline = isinstance(scenario.cluster.node, dict) and not (exc.key or "").startswith("cluster.")
        raise exc.located(file=file, key_prefix="cluster.node" if inline else None) from None
    available = len(topology.gpus)
    count = gpus or scenario.cluster.gpus or available
    if count > available:
        raise InputError(f"asks for {count} GPUs but the cluster has {available} "
                         f"({scenario.cluster.nodes} x {design.name}); allowed: 1..{available}",
                         file=file, key="cluster.gpus")
    par = scenario.parallel
    training = scenario.training
    gpu = topology.gpu_spec
    try:
        gpu.peak_flop_per_s(training.precision)
    except InputError as exc:
        raise InputError(exc.detail, file=file, key="training.precision") from None
    if training.attention in FLASH_KINDS:
        try:
            flash_efficiency(gpu, training.attention)
        except ValueError as exc:
            raise InputError(str(exc), file=file, key="training.attention") from None
    model = get_model(scenario.model, seq_len=training.seq_len, key="model", file=file)
    if training.elementwise_kernels == "eager":
        model = eager_model(model, training.precision)
    model_parallel = par.tp * par.pp * par.cp
    dp = par.dp if par.dp is not None and gpus is None else max(1, count // model_parallel)
    _check_plan(scenario, model, count, dp, file)
    finetune = _finetune_of(scenario, model, file)
    plan = ParallelPlan(
        placement=Placement(tp=par.tp, cp=par.cp, dp=dp, pp=par.pp, order=tuple(par.order.split("-")), ep=par.ep,
                            etp=par.etp),
        micro_batch=training.micro_batch,
        micro_batches=training.global_batch // (dp * training.micro_batch),
        precision=training.precision,
        optimizer=training.optimizer,
        checkpointing=training.activation_checkpointing,
        attention=resolved_attention(training),
        zero=par.zero,
        sequence_parallel=par.sequence_parallel,
        schedule=par.pp_schedule,
        virtual_stages=par.virtual_stages,
        bucket_bytes=par.bucket_mb * 2**20,
        overlap_grad_reduce=par.overlap_grad_reduce,
        overlap_param_gather=par.overlap_param_gather,
        # Weights offloaded in full training: FSDP CPUOffload / ZeRO-Infinity update them on the CPU.
        offload_optimizer=par.offload_optimizer or (par.offload_params and finetune is None),
        offload_params=par.offload_params,
        finetune=finetune,
        memory_format=training.memory_format,
        slowest_gpu_factor=slowest_gpu_factor(count, scenario.cluster.gpu_speed_spread),
        grad_reduce_dtype=grad_reduce_dtype(training.precision, par),
        fp32_weights=autocast_style(training.precision, par),
        host_dispatch_s=DISPATCH_S_PER_OP if design.host.dispatch_us_per_op is None
        else design.host.dispatch_us_per_op * 1e-6,
        cuda_graphs=training.cuda_graphs,
        moe_imbalance=moe_imbalance(scenario, model),
        moe_overlap=par.moe_overlap,
    )
    try:
        model_chunks(model, plan.chunks)
        schedule(plan.schedule, 0, par.pp, plan.micro_batches, plan.chunks_per_stage)
    except InputError as exc:
        raise exc.located(file=file) from None
    ranks = count if simulates_every_rank(count, model, plan) else par.pp      # as simulate_setup does
    check_step_size(**step_counts(model, plan, ranks), file=file)
    host = design.host.memory_gb
    return Setup(scenario, file, model, topology, gpu, count, plan, None if host is None else host * 1e9, catalog)


def _finetune_of(scenario: Scenario, model: ModelSpec, file: str | None):
    """The scenario's LoRA / QLoRA adapters (None for full training), checked against the model."""
    training = scenario.training
    if training.finetune == "none":
        return None
    if model.tokens_per_sample is None or not model.num_layers or model.family == "bert":
        raise InputError(f"{training.finetune} adapts a decoder transformer's linear layers; {model.name} is "
                         f"not one: use finetune: none", file=file, key="training.finetune")
    spec = finetune_spec(model, training.finetune, training.lora.rank, training.lora.targets)
    if not any(trainable_params(layer, spec) for layer in model.layers):
        raise InputError(f"none of the targets {', '.join(spec.targets)} is a linear layer of {model.name} "
                         f"(gelu MLPs have up and down, no gate); allowed: q, k, v, o, up, down"
                         f"{', gate' if any(op.name == 'mlp_gate' for op in model.layers[1].ops) else ''}",
                         file=file, key="training.lora.targets")
    return spec


# Up to this many GPUs every rank is simulated (so timelines show each GPU), unless that
# step would have more than FULL_SIMULATION_MAX_TASKS tasks (~3 s); beyond, one rank per
# pipeline stage stands for its identical peers (within 1%: tests/parallel).
FULL_SIMULATION_MAX_GPUS = 16
FULL_SIMULATION_MAX_TASKS = 100_000


def simulates_every_rank(gpus: int, model: ModelSpec, plan: ParallelPlan) -> bool:
    return (gpus <= FULL_SIMULATION_MAX_GPUS
            and estimated_tasks(**step_counts(model, plan, gpus)) <= FULL_SIMULATION_MAX_TASKS)


def simulate_setup(setup: Setup, symmetric: bool | None = None) -> Timeline:
    if symmetric is None:
        symmetric = not simulates_every_rank(setup.gpus, setup.model, setup.plan)
    return simulate(build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric))


def memory_of(setup: Setup) -> MemoryBreakdown:
    """Peak memory of the most loaded pipeline stage."""
    t, plan = setup.scenario.training, setup.plan
    pl = plan.placement
    chunks = model_chunks(setup.model, plan.chunks)
    sp = plan.sequence_parallel and pl.tp > 1
    boundary = model_boundary_bytes(setup.model) / pl.cp / (pl.tp if sp else 1)
    worst = None
    for stage in range(pl.pp):
        layers = [shard_experts(shard_layer(layer, pl.tp, pl.cp, sp), pl.ep, 1.0, pl.tp if experts_whole(pl) else 1)
                  for c in range(plan.chunks_per_stage) for layer in chunks[c * pl.pp + stage]]
        order = schedule(plan.schedule, stage, pl.pp, plan.micro_batches, plan.chunks_per_stage)
        # Activations are held per chunk; with v chunks a micro-batch's share is 1/v of the stage.
        live = in_flight(order) / plan.chunks_per_stage
        common = dict(micro_batch=t.micro_batch, in_flight=live, precision=t.precision,
                      optimizer=t.optimizer, checkpointing=t.activation_checkpointing,
                      flash_attention=plan.attention in FLASH_KINDS, boundary_bytes_per_sample=boundary,
                      zero=plan.zero, shards=pl.dp * pl.cp, offload_optimizer=plan.offload_optimizer,
                      grad_reduce_bytes=ELEMENT_BYTES[plan.grad_reduce_dtype],
                      bucket_view=setup.scenario.parallel.gradient_as_bucket_view, cross_entropy=t.cross_entropy)
        if plan.finetune is None and not plan.offload_params:
            memory = training_memory(layers, fp32_weights=plan.fp32_weights, **common, **_expert_memory(setup))
        else:
            memory = finetune_memory(layers, spec=plan.finetune, offload_params=plan.offload_params, **common)
        if worst is None or memory.total > worst.total:
            worst = memory
    return worst


def _expert_memory(setup: Setup) -> dict:
    """MoE models: expert state sharded over the expert-data-parallel ranks, and the all-to-all
    buffers (tokens sent and received by the busiest rank, dispatch and combine) of one layer."""
    model, plan = setup.model, setup.plan
    if model.moe is None:
        return {}
    pl = plan.placement
    _, edp = expert_groups(pl, pl.ep, pl.coords(0))
    load = rank_load_factor(model.moe, pl.ep, plan.moe_imbalance)
    tokens = plan.micro_batch * (model.tokens_per_sample or 0) / pl.cp / pl.tp
    buffers = 2 * 2 * tokens * model.moe.top_k * (model.hidden or 0) * ELEMENT_BYTES[plan.precision] * load
    return {"expert_shards": len(edp), "transient_bytes": buffers}


def host_offload_bytes_per_node(setup: Setup) -> float:
    """What one node's host memory keeps: ZeRO-Offload's optimizer state (fp32 masters and moments)
    and, with offloaded weights, each GPU's share of the base weights as stored."""
    plan = setup.plan
    if not (plan.offload_optimizer or plan.offload_params):
        return 0.0
    per_node = len(setup.topology.ranks_by_server(tuple(range(setup.gpus)))[0])
    need = 0.0
    if plan.offload_optimizer:
        kept = replace(setup, plan=replace(plan, offload_optimizer=False, offload_params=False, fp32_weights=False))
        need += memory_of(kept).optimizer
    if plan.offload_params:
        pl = plan.placement
        need += host_weight_bytes(setup.model.layers, plan.precision, plan.finetune, plan.zero,
                                  pl.dp * pl.cp) / (pl.tp * pl.pp)
    return need * per_node


def host_fit_reason(setup: Setup) -> str | None:
    need = host_offload_bytes_per_node(setup)
    if setup.host_memory_bytes is None or need <= setup.host_memory_bytes:
        return None
    what = "optimizer state" + (" and weights" if setup.plan.offload_params else "")
    return (f"the offloaded {what} {'need' if setup.plan.offload_params else 'needs'} {format_bytes(need)} of host memory per node but the node "
            f"has {format_bytes(setup.host_memory_bytes)} (cluster.node host.memory_gb); ZeRO over more "
            f"nodes divides it, or keep the optimizer (and weights) on the GPUs")


def _fit_reason(memory: MemoryBreakdown, capacity: float, gpu: GpuSpec) -> str | None:
    if memory.total <= capacity:
        return None
    parts = sorted(memory.as_dict().items(), key=lambda kv: -kv[1])
    takes = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts if v > 0)
    return (f"needs {format_bytes(memory.total)} per GPU but the {gpu.full_name} has "
            f"{format_bytes(capacity)} ({takes})")


def per_gpu_rate(setup: Setup, gpus: int) -> float | None:
    """Samples/s per GPU of the same plan on `gpus` GPUs with the same per-replica work.

    Weak scaling: micro-batch and micro-batches per step stay, the data-parallel
    degree (and the global batch) follows the GPU count. On one GPU the plan
    has no model parallelism. None when `gpus` cannot hold the plan.
    """
    plan = setup.plan
    pl = plan.placement
    per_replica = plan.micro_batch * plan.micro_batches
    if gpus == setup.gpus:
        return per_replica * pl.dp / simulate_setup(setup).end_s / gpus
    if gpus == 1:
        changes = {"parallel": {"dp": None, "tp": 1, "pp": 1, "cp": 1, "pp_schedule": "1f1b",
                                "virtual_stages": 1, "sequence_parallel": False, "ep": 1, "etp": None}}
        dp = 1
    else:
        if gpus % (pl.tp * pl.pp * pl.cp) or (gpus // (pl.tp * pl.pp) * (pl.tp if pl.etp == 1 else 1)) % pl.ep:
            return None
        changes = {"parallel": {"dp": None}}
        dp = gpus // (pl.tp * pl.pp * pl.cp)
    scenario = setup.scenario.with_changes(training={"global_batch": per_replica * dp}, **changes)
    return per_replica * dp / simulate_setup(prepare(scenario, setup.file, gpus=gpus,
                                                     catalog=setup.catalog)).end_s / gpus


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
    return {**summary, "trainable_params": sum(trainable_params(layer, setup.plan.finetune)
                                               for layer in setup.model.layers)}


def run(scenario: Scenario, file: str | None = None, *, scaling_counts: list[int] | None = None,
        baseline: bool = True, catalog: Catalog | None = None, max_seconds: float | None = None) -> StepResult:
    """Simulate one step of the scenario, and the same plan on fewer GPUs for scaling.

    `baseline` False skips the 1-GPU run behind `scaling_efficiency` (then None), as sweeps do.
    `max_seconds`: raise scalesim.limits.TimeLimitExceeded (an InputError) after that much wall time.
    """
    if max_seconds is not None:
        with time_limit(max_seconds):
            return run(scenario, file, scaling_counts=scaling_counts, baseline=baseline, catalog=catalog)
    setup = prepare(scenario, file, catalog=catalog)
    timeline = simulate_setup(setup)
    step = timeline.end_s
    rank = critical_rank(timeline)
    parts = replace(breakdown(timeline.for_rank(rank), step),
                    compute_slowed_by_comm=timeline.compute_slowdown_s.get(rank, 0.0))
    training = scenario.training
    model = setup.model
    gpu = setup.gpu
    samples_per_s = training.global_batch / step
    tokens_per_s = samples_per_s * model.tokens_per_sample if model.tokens_per_sample else None
    flop_per_s_per_gpu = model.model_flop_per_sample * samples_per_s / setup.gpus
    peak = gpu.peak_flop_per_s(training.precision)

    memory = memory_of(setup)
    capacity = gpu.memory_bytes
    reason = _fit_reason(memory, capacity, gpu)
    from scalesim.fitting import combined_option, describe, fit_options, more_gpus_option

    prepare_here = partial(prepare, catalog=catalog)     # what-if plans resolve names as this run did

    if reason is None:
        reason = host_fit_reason(setup)
        if reason is not None:
            options = fit_options(setup, prepare_here, memory_of, simulate_setup, host_fit=host_fit_reason)
            if options:
                reason += "; " + describe(options, setup.gpus, capacity)
    else:
        options = fit_options(setup, prepare_here, memory_of, simulate_setup, host_fit=host_fit_reason)
        combined = None if options else combined_option(setup, prepare_here, simulate_setup)
        options = options or ([combined] if combined is not None else [])
        more = None if options else more_gpus_option(setup, prepare_here, memory_of, simulate_setup, host_fit_reason)
        reason += "; " + describe(options, setup.gpus, capacity, more, len(setup.topology.gpus))

    own_rate = samples_per_s / setup.gpus          # the step just simulated; no need to run it again
    single = None
    if baseline or scaling_counts:
        single = own_rate if setup.gpus == 1 else per_gpu_rate(setup, 1)
    efficiency = samples_per_s / setup.gpus / single if single else None
    known = {setup.gpus: own_rate, 1: single}      # simulated already: never twice
    scaling = [{"gpus": k, "samples_per_gpu_per_s": rate, "scaling_efficiency": rate / single}
               for k, rate in ((k, known[k] if k in known else per_gpu_rate(setup, k))
                               for k in scaling_counts or []) if rate is not None]

    if training.tokens is not None and tokens_per_s is None:
        raise InputError("the model does not take tokens; give epochs and dataset_samples instead",
                         file=file, key="training.tokens")
    from scalesim.procurement import run_inputs

    inputs, assumptions = run_inputs(setup, timeline, samples_per_s=samples_per_s, tokens_per_s=tokens_per_s)
    money = training_economics(inputs)

    return StepResult(
        scenario=scenario.name, gpus=setup.gpus, gpu_name=gpu.name, fits=reason is None, reason=reason,
        memory_per_gpu_bytes=memory.total, memory_capacity_bytes=capacity,
        memory_breakdown=memory.as_dict(), step_time_s=step, breakdown=parts,
        samples_per_s=samples_per_s, tokens_per_s=tokens_per_s,
        tflops_per_gpu=flop_per_s_per_gpu / 1e12, mfu=flop_per_s_per_gpu / peak,
        scaling_efficiency=efficiency, time_to_train_s=money.time_to_train_s, cost_usd=money.cost_usd,
        energy_kwh=money.energy_kwh,
        plan=_with_trainable(plan_summary(setup.plan), setup),
        scaling=scaling,
        timeline=timeline,
        economics=money.as_json(), reliability=money.reliability.as_json() if money.reliability else {},
        assumptions=assumptions, inputs=inputs, slowest_gpu_factor=setup.plan.slowest_gpu_factor,
        fit_confidence=fit_confidence(memory.total, capacity) if reason is None or memory.total > capacity
        else "does_not_fit",
    )
