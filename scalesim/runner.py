"""From a scenario to a result: resolve names, check the plan, build, simulate, summarise.

This is the only place that wires the layers together (the CLI calls it).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.costs.economics import Budget, Prices, training_economics
from scalesim.costs.memory import MemoryBreakdown, memory_per_gpu
from scalesim.engine import Timeline, simulate
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.models import ModelSpec, get_model
from scalesim.parallel import DdpPlan, build_ddp_program
from scalesim.result import StepResult, breakdown, critical_rank
from scalesim.scenario import Scenario, resolved_attention
from scalesim.topology import Fabric, Topology, build_cluster, load_node_design
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
    plan: DdpPlan


def prepare(scenario: Scenario, file: str | None = None, *, gpus: int | None = None) -> Setup:
    """Resolve catalog names and check the parallel plan; `gpus` overrides the count."""
    design = load_node_design(scenario.cluster.node, key="cluster.node", file=file)
    fabric = scenario.cluster.fabric
    try:
        topology = build_cluster(design, nodes=scenario.cluster.nodes, fabric=None if fabric is None else Fabric(
            fabric.link, fabric.nics_per_node, fabric.topology, fabric.oversubscription))
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
    unsupported = [(k, v) for k, v, default in
                   (("tp", par.tp, 1), ("pp", par.pp, 1), ("cp", par.cp, 1), ("zero", par.zero, 0))
                   if v != default]
    if unsupported:
        k, v = unsupported[0]
        raise InputError(f"{k}: {v} is not simulated yet (model parallelism and ZeRO arrive in a later "
                         "release); allowed now: tp: 1, pp: 1, cp: 1, zero: 0", file=file,
                         key=f"parallel.{k}")
    dp = count if par.dp is None or gpus is not None else par.dp
    if dp * par.tp * par.pp * par.cp != count:
        raise InputError(f"dp x tp x pp x cp = {dp} x {par.tp} x {par.pp} x {par.cp} = "
                         f"{dp * par.tp * par.pp * par.cp}, but the scenario has {count} GPUs; "
                         "they must be equal", file=file, key="parallel.dp")
    training = scenario.training
    per_step = dp * training.micro_batch
    if training.global_batch % per_step:
        raise InputError(f"global_batch ({training.global_batch}) must be a multiple of "
                         f"dp x micro_batch ({dp} x {training.micro_batch} = {per_step})",
                         file=file, key="training.global_batch")
    gpu = topology.gpu_spec
    try:
        gpu.peak_flop_per_s(training.precision)
    except InputError as exc:
        raise InputError(exc.detail, file=file, key="training.precision") from None
    model = get_model(scenario.model, seq_len=training.seq_len, key="model", file=file)
    plan = DdpPlan(
        ranks=tuple(range(count)),
        micro_batch=training.micro_batch,
        accumulation_steps=training.global_batch // per_step,
        precision=training.precision,
        optimizer=training.optimizer,
        checkpointing=training.activation_checkpointing,
        bucket_bytes=par.bucket_mb * 2**20,
        overlap_grad_reduce=par.overlap_grad_reduce,
        attention=resolved_attention(training),
    )
    return Setup(scenario, file, model, topology, gpu, count, plan)


def simulate_setup(setup: Setup) -> Timeline:
    program = build_ddp_program(setup.model, setup.gpu, setup.topology, setup.plan)
    return simulate(program)


def memory_of(setup: Setup) -> MemoryBreakdown:
    t = setup.scenario.training
    return memory_per_gpu(setup.model, micro_batch=t.micro_batch, precision=t.precision,
                          optimizer=t.optimizer, checkpointing=t.activation_checkpointing,
                          flash_attention=setup.plan.attention == "flash",
                          ddp_buckets=setup.gpus > 1)


def _fit_reason(memory: MemoryBreakdown, capacity: float, gpu: GpuSpec) -> str | None:
    if memory.total <= capacity:
        return None
    parts = sorted(memory.as_dict().items(), key=lambda kv: -kv[1])
    takes = ", ".join(f"{k} {format_bytes(v)}" for k, v in parts if v > 0)
    return (f"needs {format_bytes(memory.total)} per GPU but the {gpu.full_name} has "
            f"{format_bytes(capacity)} ({takes}); try a smaller micro_batch or "
            "activation_checkpointing: full")


def per_gpu_rate(setup: Setup, gpus: int) -> float:
    """Samples/s per GPU of the same plan on `gpus` GPUs with the same per-GPU work.

    Weak scaling, as DDP users scale: micro-batch and accumulation steps stay,
    the global batch grows with the GPU count. Comparing per-GPU rates against
    one GPU isolates what communication costs.
    """
    plan = setup.plan
    per_gpu_batch = plan.micro_batch * plan.accumulation_steps
    if gpus == setup.gpus:
        timeline = simulate_setup(setup)
    else:
        scenario = setup.scenario.with_changes(training={"global_batch": per_gpu_batch * gpus},
                                               parallel={"dp": None})
        timeline = simulate_setup(prepare(scenario, setup.file, gpus=gpus))
    return per_gpu_batch / timeline.end_s


def run(scenario: Scenario, file: str | None = None, *, scaling_counts: list[int] | None = None) -> StepResult:
    """Simulate one step of the scenario, and the same plan on fewer GPUs for scaling."""
    setup = prepare(scenario, file)
    timeline = simulate_setup(setup)
    step = timeline.end_s
    rank = critical_rank(timeline)
    parts = breakdown(timeline.for_rank(rank), step)
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

    single = per_gpu_rate(setup, 1)
    efficiency = samples_per_s / setup.gpus / single
    scaling = [{"gpus": k, "samples_per_gpu_per_s": rate, "scaling_efficiency": rate / single}
               for k, rate in ((k, per_gpu_rate(setup, k)) for k in scaling_counts or [])]

    if training.tokens is not None and tokens_per_s is None:
        raise InputError("the model does not take tokens; give epochs and dataset_samples instead",
                         file=file, key="training.tokens")
    money = training_economics(
        gpu=gpu, gpus=setup.gpus, samples_per_s=samples_per_s, tokens_per_s=tokens_per_s,
        busy_fraction=parts.compute / step,
        budget=Budget(training.tokens, training.epochs, training.dataset_samples),
        prices=Prices(scenario.pricing.gpu_hour_usd, scenario.pricing.electricity_usd_per_kwh))

    return StepResult(
        scenario=scenario.name, gpus=setup.gpus, gpu_name=gpu.name, fits=reason is None, reason=reason,
        memory_per_gpu_bytes=memory.total, memory_capacity_bytes=capacity,
        memory_breakdown=memory.as_dict(), step_time_s=step, breakdown=parts,
        samples_per_s=samples_per_s, tokens_per_s=tokens_per_s,
        tflops_per_gpu=flop_per_s_per_gpu / 1e12, mfu=flop_per_s_per_gpu / peak,
        scaling_efficiency=efficiency, time_to_train_s=money.time_to_train_s, cost_usd=money.cost_usd,
        energy_kwh=money.energy_kwh,
        plan={"dp": len(setup.plan.ranks), "tp": 1, "pp": 1, "cp": 1, "zero": 0,
              "micro_batch": setup.plan.micro_batch,
              "accumulation_steps": setup.plan.accumulation_steps,
              "precision": setup.plan.precision},
        scaling=scaling,
        timeline=timeline,
    )
