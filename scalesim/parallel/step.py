"""One training step compiled: what (model, plan, GPU, cluster) come to, derived once.

The per-stage layers (cut into pipeline chunks, sharded by tensor, context and
expert parallelism), each stage's micro-batch order, the peak memory and the
per-rank program are all read from here, by the run, the plan search, the
what-if fixes, the validation and the claims page; none of them derives its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from scalesim.costs.compute import ELEMENT_BYTES, FLASH_KINDS
from scalesim.costs.finetune import finetune_memory
from scalesim.costs.memory import MemoryBreakdown, model_boundary_bytes, training_memory, with_tied_head_copy
from scalesim.costs.nanotron_memory import tp_gather_buffer_bytes, with_gathered_inputs
from scalesim.costs.recompute import recomputed_blocks
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec
from scalesim.parallel.builder import build_program
from scalesim.parallel.cp_exchange import gather_buffer_bytes
from scalesim.parallel.experts import expert_groups, experts_whole, rank_load_factor, shard_experts
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.schedules import Step, in_flight, schedule
from scalesim.parallel.sharding import shard_layer
from scalesim.parallel.stages import model_chunks
from scalesim.program import Program, no_collection
from scalesim.topology import Topology


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as each of its ranks holds it."""

    layers: tuple[LayerSpec, ...]     # its chunks' layers, sharded (experts at their mean load)
    order: tuple[Step, ...]           # its forward / backward passes in schedule order
    in_flight: float                  # micro-batches whose activations it holds at the peak
    recomputed: tuple[bool, ...] = ()  # per layer: checkpointed as the plan says (partial recompute)


@dataclass(frozen=True)
class CompiledStep:
    """A step ready to simulate and to size; build it with `compile_step`."""

    model: ModelSpec
    gpu: GpuSpec
    topology: Topology
    plan: ParallelPlan
    every_rank: bool                  # simulate each rank, or one per stage for its identical peers
    chunks: tuple[tuple[LayerSpec, ...], ...]
    stages: tuple[Stage, ...]
    # The caller's cache of collective plans and timings on this topology (scalesim/app/caches.py).
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def program(self) -> Program:
        with no_collection():       # hundreds of thousands of tasks, no cycles among them
            return build_program(self.model, self.gpu, self.topology, self.plan, symmetric=not self.every_rank,
                                 chunks=self.chunks, memo=self.memo, orders=tuple(s.order for s in self.stages))

    @cached_property
    def memory(self) -> MemoryBreakdown:
        """Peak memory of the most loaded pipeline stage."""
        return max((stage_memory(self.model, self.plan, stage) for stage in self.stages), key=lambda m: m.total)

    @cached_property
    def first_stage_memory(self) -> MemoryBreakdown:
        """Peak memory of a rank of the first pipeline stage: world rank 0, the rank whose memory
        nanotron (helpers.py log_throughput, rank 0 only; ranks ordered ep, pp, dp, tp) and
        fsdp_qlora (Logger.log, rank 0 only) report. It holds the most in-flight micro-batches."""
        return stage_memory(self.model, self.plan, self.stages[0])

    def optimizer_state_bytes(self) -> float:
        """The optimizer state of the most loaded stage, as it would be held on the GPU (what
        ZeRO-Offload moves to the host)."""
        kept = replace(self.plan, offload_optimizer=False, offload_params=False, fp32_weights=False)
        return max((stage_memory(self.model, kept, stage) for stage in self.stages),
                   key=lambda m: m.total).optimizer


def compile_step(model: ModelSpec, gpu: GpuSpec, topology: Topology, plan: ParallelPlan,
                 every_rank: bool, memo: dict | None = None) -> CompiledStep:
    """Cut, shard and order the step; InputError when the plan's pipeline cannot be formed."""
    pl = plan.placement
    chunks = tuple(model_chunks(model, plan.chunks, plan.pipeline_blocks))
    sp = plan.sequence_parallel and pl.tp > 1
    memo = {} if memo is None else memo
    stages = []
    for stage in range(pl.pp):
        layers = tuple(shard_experts(shard_layer(layer, pl.tp, pl.cp, sp, memo), pl.ep, 1.0,
                                     pl.tp if experts_whole(pl) else 1, plan.moe_dispatcher)
                       for c in range(plan.chunks_per_stage) for layer in chunks[c * pl.pp + stage])
        key = ("schedule", plan.schedule, stage, pl.pp, plan.micro_batches, plan.chunks_per_stage)
        if key not in memo:          # the same for every plan of this pipeline shape
            order = tuple(schedule(plan.schedule, stage, pl.pp, plan.micro_batches, plan.chunks_per_stage))
            memo[key] = (order, in_flight(list(order)))
        order, held = memo[key]
        recomputed = tuple(r for c in range(plan.chunks_per_stage)
                           for r in recomputed_blocks(chunks[c * pl.pp + stage], plan.recompute_layers))
        # Activations are held per chunk; with v chunks a micro-batch's share is 1/v of the stage.
        stages.append(Stage(layers, order, held / plan.chunks_per_stage, recomputed))
    return CompiledStep(model, gpu, topology, plan, every_rank, chunks, tuple(stages), memo)


def stage_memory(model: ModelSpec, plan: ParallelPlan, stage: Stage) -> MemoryBreakdown:
    """Peak memory of one rank of `stage`."""
    pl = plan.placement
    sp = plan.sequence_parallel and pl.tp > 1
    common = dict(micro_batch=plan.micro_batch, in_flight=stage.in_flight, precision=plan.precision,
                  optimizer=plan.optimizer, checkpointing=plan.checkpointing,
                  flash_attention=plan.attention in FLASH_KINDS,
                  boundary_bytes_per_sample=model_boundary_bytes(model) / pl.cp / (pl.tp if sp else 1),
                  zero=plan.zero, shards=min(plan.hsdp_shard or pl.dp, pl.dp) * pl.cp, offload_optimizer=plan.offload_optimizer,
                  grad_reduce_bytes=ELEMENT_BYTES[plan.grad_reduce_dtype],
                  bucket_view=plan.gradient_as_bucket_view, cross_entropy=plan.cross_entropy,
                  recomputed=stage.recomputed, recompute_modules=plan.recompute_modules)
    layers = with_tied_head_copy(stage.layers, model.vocab, model.hidden, pl.tp)
    tokens = (model.tokens_per_sample or 0) / pl.cp     # TP gathers the rank's share of the sequence under CP
    if plan.tp_saves_gathered_inputs and sp:
        layers = with_gathered_inputs(layers, pl.tp, tokens, model.hidden or 0)
    if plan.finetune is None and not plan.offload_params:
        experts = _expert_memory(model, plan)
        transient = experts.pop("transient_bytes", 0.0) + tp_gather_buffer_bytes(
            plan.tp_gather_buffers, plan.micro_batch, tokens, model.hidden or 0, ELEMENT_BYTES[plan.precision],
            pl.tp, sp) + gather_buffer_bytes(model, plan)      # CP's all-gathered K/V (parallel/cp_exchange.py)
        return training_memory(layers, fp32_weights=plan.fp32_weights, zero1_over_ddp=plan.zero1_over_ddp,
                               fp32_accumulation=plan.grad_accumulation == "fp32-add",
                               transient_bytes=transient, **common, **experts)
    return finetune_memory(layers, spec=plan.finetune, offload_params=plan.offload_params, **common)


def _expert_memory(model: ModelSpec, plan: ParallelPlan) -> dict:
    """MoE models: expert state sharded over the expert-data-parallel ranks, and the all-to-all
    buffers (tokens sent and received by the busiest rank, dispatch and combine) of one layer."""
    if model.moe is None:
        return {}
    pl = plan.placement
    _, edp = expert_groups(pl, pl.ep, pl.coords(0))
    load = rank_load_factor(model.moe, pl.ep, plan.moe_imbalance)
    tokens = plan.micro_batch * (model.tokens_per_sample or 0) / pl.cp / pl.tp
    buffers = 2 * 2 * tokens * model.moe.top_k * (model.hidden or 0) * ELEMENT_BYTES[plan.precision] * load
    return {"expert_shards": len(edp), "transient_bytes": buffers}


def pipeline_runs(model: ModelSpec, schedule_name: str, pp: int, virtual_stages: int, micro_batches: int) -> bool:
    """Whether the pipeline schedule can run this split (enough layers, micro-batches it accepts)."""
    try:
        model_chunks(model, pp * virtual_stages)
        schedule(schedule_name, 0, pp, micro_batches, virtual_stages)
    except (InputError, ValueError):
        return False
    return True
