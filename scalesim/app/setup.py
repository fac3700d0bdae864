"""From a scenario to a checked, compiled step: resolve names, check the plan, compile.

`prepare` is the one way in for every command (run, sweep, compare, the what-if fixes,
validation): what it returns holds the compiled step (`parallel/step.py`) that they all query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from scalesim.app.caches import Caches
from scalesim.app.clusters import cluster_of, cluster_size
from scalesim.app.plan_checks import check_plan, pipeline_blocks_of
from scalesim.costs.compute import FLASH_KINDS, flash_efficiency
from scalesim.costs.flash import fp8_attention_gpus, fp8_attention_runs
from scalesim.costs.eager import eager_model, eager_rope_model, gemm_gelu_model, with_nanotron_kernels
from scalesim.costs.finetune import FinetuneSpec, finetune_spec, host_weight_bytes, trainable_params
from scalesim.costs.float8_casts import with_fp8_recipe
from scalesim.costs.fp8_act_store import store_refusal, with_fp8_activation_store
from scalesim.costs.fp8_grad_casts import mxfp8_runs
from scalesim.costs.projections import with_separate_projections
from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.costs.optimizer_tail import grad_clip_host_sync
from scalesim.costs.memory import FP8_SAVED_BYTES, MemoryBreakdown, with_saved_activations
from scalesim.costs.mla_rope import unfused_mla_rope_model
from scalesim.costs.megatron_host import framework_layer_host_s
from scalesim.costs.nanotron_memory import nanotron_tp_gather_buffers
from scalesim.costs.recompute import compiled_saves, modules_of
from scalesim.costs.te_ops import fused_qkv_rope_model
from scalesim.costs.variability import slowest_gpu_factor
from scalesim.engine import Timeline, simulate, step_time_s
from scalesim.errors import InputError
from scalesim.hardware import GpuSpec
from scalesim.hardware.user_catalog import Catalog
from scalesim.limits import charge, check_step_size, estimated_tasks
from scalesim.models import ModelSpec, get_model
from scalesim.models.conv_fusion import fuse_resnet
from scalesim.models.packing import fp8_attention, masked_lm_head, packed_attention
from scalesim.parallel.cp_a2a import all_to_all_model
from scalesim.parallel.cp_exchange import all_gathered, gathers
from scalesim.parallel.experts import default_imbalance
from scalesim.parallel.placement import Placement
from scalesim.parallel.tp_overlap import tp_overlap_spec
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.size import step_cost, step_counts
from scalesim.parallel.step import CompiledStep, compile_step
from scalesim.scenario import Scenario, blames_framework, resolved_attention
from scalesim.topology import NodeDesign, Topology
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
    step: CompiledStep                          # per-stage layers, schedule, memory, program
    host_memory_bytes: float | None = None      # per node, from the design's host.memory_gb
    catalog: Catalog | None = None              # where its GPU and link names resolved [built-in]
    caches: Caches | None = None                # what its command reuses: plans derived from it share them
    every_rank_asked: bool | None = None        # prepare's every_rank, passed on to plans derived from it


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
    """The scenario's gradient reduction precision, `auto` resolved (see ParallelSpec); fp32-add: the fp32 buffers."""
    if par.grad_reduce_dtype != "auto":
        return par.grad_reduce_dtype
    if precision in ("fp32", "tf32") or autocast_style(precision, par) or par.grad_accumulation == "fp32-add":
        return "fp32"
    return "bf16" if precision == "fp8" else precision


@blames_framework     # an error naming a key the framework set says so (scenario/frameworks.py)
def prepare(scenario: Scenario, file: str | None = None, *, gpus: int | None = None,
            catalog: Catalog | None = None, every_rank: bool | None = None, caches: Caches | None = None) -> Setup:
    """Resolve catalog names (in `catalog`, [the built-in one]), check the parallel plan and
    compile the step; `gpus` overrides the count (dp follows). `every_rank`: simulate each
    rank (True) or one per pipeline stage for its identical peers (False); None chooses by size
    (`simulates_every_rank`). `caches`: what the calling command reuses (a fresh one if None)."""
    caches = Caches() if caches is None else caches
    asked = every_rank
    design, count = cluster_size(scenario, file, gpus, catalog, caches)
    par, training = scenario.parallel, scenario.training
    # The model as the scenario trains it, depending on its model and training keys alone: a sweep's plans share it.
    key = (json.dumps(scenario.model, sort_keys=True, default=str), training.model_dump_json(), file)
    model = caches.model(key, lambda: _trained_model(scenario, file))
    if training.optimizer == "none" and par.offload_optimizer:
        raise InputError("optimizer: none has no state or update to offload to the host; allowed: false",
                         file=file, key="parallel.offload_optimizer")
    if par.pp_scatter_gather and par.overlap_p2p_comm is not False:     # parallel/p2p_batched.py
        raise InputError("pp_scatter_gather is Megatron-LM of 2021's, whose P2P exchanges are batched and "
                         "synchronized: set overlap_p2p_comm: false with it; allowed: false", file=file,
                         key="parallel.pp_scatter_gather")
    dp = par.dp if par.dp is not None and gpus is None else max(1, count // (par.tp * par.pp * par.cp))
    check_plan(scenario, model, count, dp, file)
    if gathers(model, par.cp, par.cp_comm_type):         # CP all-gathers K and V (parallel/cp_exchange.py)
        model = caches.model(key + ("cp all_gather",), lambda: all_gathered(model))
    elif par.cp > 1 and par.cp_comm_type == "a2a":     # Q, K, V all-to-all'd to heads (parallel/cp_a2a.py)
        model = caches.model(key + ("cp a2a",), lambda: all_to_all_model(model))
    topology = cluster_of(scenario, design, file, catalog, caches)     # built once the plan is known to fit it
    gpu = topology.gpu_spec
    _check_gpu(gpu, training, file)
    plan = _plan_of(scenario, model, design, count, dp, _finetune_of(scenario, model, file))
    if every_rank is None:
        every_rank = simulates_every_rank(count, model, plan)
    try:
        step = compile_step(model, gpu, topology, plan, every_rank, caches.memo(topology))
    except InputError as exc:
        raise exc.located(file=file) from None
    check_step_size(**step_counts(model, plan, count if every_rank else par.pp), file=file)
    host = design.host.memory_gb
    return Setup(scenario, file, model, topology, gpu, count, plan, step, None if host is None else host * 1e9,
                 catalog, caches, asked)


def _trained_model(scenario: Scenario, file: str | None) -> ModelSpec:
    """The scenario's model with its kernels' variants, checked against its training keys."""
    training = scenario.training
    model = get_model(scenario.model, seq_len=training.seq_len, key="model", file=file)
    model = _model_variant(model, training, file)
    if training.saved_activations == "nanotron" and not any(op.name == "swiglu" for layer in model.layers
                                                              for op in layer.ops):
        raise InputError("nanotron's saved activations are those of its Llama block (SwiGLU MLP); this model "
                         "has none: allowed here: megatron", file=file, key="training.saved_activations")
    present = ', '.join(modules_of({op.name for layer in model.layers for op in layer.ops}))
    if idle := [m for m in training.recompute_modules or () if m not in present.split(', ')]:
        raise InputError(f"recompute module(s) {', '.join(idle)} re-run nothing in {model.name} (it has none of "
                         f"their ops); allowed here: {present or 'none (leave recompute_modules out)'}",
                         file=file, key="training.recompute_modules")
    # Before eager_model: the nanotron extra is counted from the one fused SwiGLU op, not its eager pieces.
    model = with_saved_activations(model, training.saved_activations, training.precision)
    if training.fp8_activation_input_store and (why := store_refusal(
            model, training.saved_activations, training.elementwise_kernels, tuple(training.recompute_modules or ()))):
        raise InputError(why, file=file, key="training.fp8_activation_input_store")
    model = with_fp8_activation_store(model, training.fp8_activation_input_store)     # costs/fp8_act_store.py
    if training.elementwise_kernels == "eager":
        model = eager_model(model, training.precision)
    elif training.elementwise_kernels == "compiled-complex-rope":
        model = compiled_saves(eager_rope_model(model, training.precision))
    model = with_nanotron_kernels(model, training.elementwise_kernels, training.cross_entropy, training.precision)
    model = with_fp8_recipe(model, training.fp8_recipe, training.precision,       # costs/float8_casts.py
                            tuple(training.fp8_amax_fused))
    if (separate := with_separate_projections(model, training.fused_projections, training.elementwise_kernels)) is model \
            and not training.fused_projections:
        raise InputError(f"fused_projections: false splits a dense transformer block's q/k/v projection; {model.name} "
                         "has none: allowed here: true", file=file, key="training.fused_projections")
    model = separate
    if training.fused_qkv_rope:           # Transformer Engine's fused QKV + RoPE kernel (costs/te_ops.py)
        if (fused := fused_qkv_rope_model(model)) is None or training.elementwise_kernels != "fused":
            raise InputError("fused_qkv_rope is Megatron-Core's one Transformer Engine kernel for the split and "
                             "RoPE of a fused qkv projection: it needs a RoPE model with one (not MLA), "
                             "fused_projections true and elementwise_kernels fused "
                             f"({model.name}, {training.elementwise_kernels}); "
                             "allowed here: false", file=file, key="training.fused_qkv_rope")
        model = fused
    if not training.rope_fusion:          # MLA's eager RoPE path (costs/mla_rope.py)
        if (unfused := unfused_mla_rope_model(model)) is None:
            raise InputError(f"rope_fusion: false is modelled for multi-head latent attention; {model.name} has "
                             "none: allowed here: true", file=file, key="training.rope_fusion")
        model = unfused
    return model


def _check_gpu(gpu: GpuSpec, training, file: str | None) -> None:
    """The GPU runs the scenario's precision and attention kernel."""
    try:
        gpu.peak_flop_per_s(training.precision)
    except InputError as exc:
        raise InputError(exc.detail, file=file, key="training.precision") from None
    if training.attention in FLASH_KINDS:
        try:
            flash_efficiency(gpu, training.attention)
        except ValueError as exc:
            raise InputError(str(exc), file=file, key="training.attention") from None
    if training.fp8_attention and not fp8_attention_runs(gpu):
        raise InputError(f"no published FP8 attention rate for {gpu.full_name} ({gpu.name}, {gpu.arch}; none on "
                         "sm_120 Blackwell, where Transformer Engine has no FP8 attention); allowed GPUs: "
                         f"{', '.join(fp8_attention_gpus())}: use fp8_attention: false", file=file,
                         key="training.fp8_attention")
    if training.fp8_recipe == "transformer-engine-mxfp8" and not mxfp8_runs(gpu):
        raise InputError(f"Transformer Engine's MXFP8 needs a Blackwell datacenter part (sm_100) or CDNA 4 "
                         f"(costs/fp8_grad_casts.py); {gpu.full_name} ({gpu.name}, {gpu.arch}) has none; allowed "
                         "here: transformer-engine, transformer-engine-current, torchao-tensorwise",
                         file=file, key="training.fp8_recipe")


def _plan_of(scenario: Scenario, model: ModelSpec, design: NodeDesign, count: int, dp: int,
             finetune: FinetuneSpec | None) -> ParallelPlan:
    """The scenario's parallel plan, every default resolved."""
    par, training = scenario.parallel, scenario.training
    return ParallelPlan(
        placement=Placement(tp=par.tp, cp=par.cp, dp=dp, pp=par.pp, order=tuple(par.order.split("-")), ep=par.ep,
                            etp=par.etp),
        micro_batch=training.micro_batch,
        micro_batches=training.global_batch // (dp * training.micro_batch),
        precision=training.precision,
        optimizer=training.optimizer,
        checkpointing=training.activation_checkpointing,
        recompute_modules=tuple(training.recompute_modules or ()),
        attention=resolved_attention(training),
        zero=par.zero,
        sequence_parallel=par.sequence_parallel,
        sequence_parallel_layout=par.sequence_parallel_layout,
        schedule=par.pp_schedule,
        overlap_p2p_comm=par.overlap_p2p_comm,
        pp_scatter_gather=par.pp_scatter_gather,
        virtual_stages=par.virtual_stages,
        bucket_bytes=par.bucket_mb * 2**20, bucket_params=par.bucket_params, grad_nan_check=par.grad_nan_check,
        param_gather_with_optimizer_step=par.param_gather_with_optimizer_step, align_param_gather=par.align_param_gather,
        overlap_grad_reduce=par.overlap_grad_reduce, overlap_param_gather=par.overlap_param_gather,
        fp8_param_gather=par.fp8_param_gather, fp8_delayed_scaling=training.fp8_recipe == "transformer-engine",
        # Weights offloaded in full training: FSDP CPUOffload / ZeRO-Infinity update them on the CPU.
        offload_optimizer=par.offload_optimizer or (par.offload_params and finetune is None
                                                     and training.optimizer != "none"),
        offload_params=par.offload_params,
        finetune=finetune,
        memory_format=training.memory_format,
        slowest_gpu_factor=slowest_gpu_factor(count, scenario.cluster.gpu_speed_spread),
        grad_reduce_dtype=grad_reduce_dtype(training.precision, par),
        fp32_weights=autocast_style(training.precision, par),
        host_dispatch_s=DISPATCH_S_PER_OP if design.host.dispatch_us_per_op is None
        else design.host.dispatch_us_per_op * 1e-6,
        cuda_graphs=training.cuda_graphs, grad_clip_host_sync=_clip_host_sync(training, par),
        moe_imbalance=moe_imbalance(scenario, model),
        moe_overlap=par.moe_overlap,
        moe_dispatcher=par.moe_dispatcher,
        gradient_as_bucket_view=par.gradient_as_bucket_view,
        zero1_over_ddp=par.zero1_over_ddp,
        grad_accumulation=par.grad_accumulation,
        pipeline_balance=par.pipeline_balance,
        pipeline_layer_host_s=framework_layer_host_s(model, training, par,
                                                     -(-count // design.gpus), resolved_attention(training), design.host),
        cross_entropy=training.cross_entropy,
        recompute_layers=training.recompute_num_layers,
        pipeline_blocks=pipeline_blocks_of(par, model),
        fsdp_version=par.fsdp_version, fsdp_keep_last_block=par.fsdp_keep_last_block, hsdp_shard=par.hsdp_shard,
        fsdp_backward_prefetch=par.fsdp_backward_prefetch or "pre",   # scenario/__init__.py: every default prefetches
        nccl_max_ctas=tuple(sorted(par.nccl_max_ctas.items())), cp_torch_ring=par.cp_comm_type == "torch_ring",
        tp_overlap=tp_overlap_spec(par.tp_comm_overlap), loss_check_host_sync=training.loss_check_host_sync,
        tp_gather_buffers=nanotron_tp_gather_buffers(par.tp_recompute_allgather)
        if training.saved_activations == "nanotron" else 0,
        tp_saves_gathered_inputs=not par.tp_recompute_allgather,
        tp_async=par.tp_linear_async_communication,
        sp_backward="split" if par.tp_linear_async_communication else par.sequence_parallel_backward,
        mla_down_proj=par.mla_down_proj, layer_forward_host_sync=training.layer_forward_host_sync,
    )


def _clip_host_sync(training, par) -> bool:
    """Whether the step reads the gradient norm on the host before the update (costs/optimizer_tail.py)."""
    return grad_clip_host_sync(training.grad_clip_host_sync, par.zero, par.zero1_over_ddp, training.optimizer,
                               par.offload_optimizer or par.offload_params)


def _model_variant(model: ModelSpec, training, file: str | None) -> ModelSpec:
    """The model as the scenario's kernels run it: fused conv-BN-ReLU, packed rows, masked MLM head."""
    model = fuse_resnet(model, training.conv_fusion)
    if training.fused_gemm_gelu:
        model = gemm_gelu_model(model)
    if training.fp8_attention:
        model = fp8_attention(model)
    if training.packed_sequences > 1:
        if model.tokens_per_sample is None or training.packed_sequences > model.tokens_per_sample:  # a token each
            raise InputError(f"packs sequences of a token or more into {model.name}'s rows of {model.tokens_per_sample or 'no'}"
                             " tokens (allowed: 1 to seq_len)", key="training.packed_sequences", file=file)
        model = packed_attention(model, training.packed_sequences)
    if training.mlm_positions is not None:
        if model.family != "bert" or training.mlm_positions > model.tokens_per_sample:
            raise InputError(f"mlm_positions applies to BERT models, at most seq_len "
                             f"({model.tokens_per_sample}) positions; {model.name} given",
                             key="training.mlm_positions", file=file)
        model = masked_lm_head(model, training.mlm_positions)
    if training.moe_capacity_factor is not None:
        if model.moe is None:
            raise InputError(f"moe_capacity_factor applies to mixture-of-experts models; {model.name} has no experts "
                             "(allowed: null)", key="training.moe_capacity_factor", file=file)
        model = replace(model, moe=replace(model.moe, capacity_factor=training.moe_capacity_factor))
    return model


def _finetune_of(scenario: Scenario, model: ModelSpec, file: str | None):
    """The scenario's LoRA / QLoRA adapters (None for full training), checked against the model."""
    training = scenario.training
    if training.finetune == "none":
        if training.te_op_fuser:
            raise InputError("te_op_fuser is modelled for LoRA fine-tuning through NeMo's Megatron-core adapters "
                             "(costs/te_ops.py): it needs finetune lora or qlora with lora.layout megatron; "
                             "allowed here: false", file=file, key="training.te_op_fuser")
        return None
    if model.tokens_per_sample is None or not model.num_layers or model.family == "bert":
        raise InputError(f"{training.finetune} adapts a decoder transformer's linear layers; {model.name} is "
                         f"not one: use finetune: none", file=file, key="training.finetune")
    te_fp8 = training.saved_activations == "transformer-engine" and training.precision == "fp8"
    if training.te_op_fuser and training.lora.layout != "megatron":
        raise InputError("te_op_fuser is Transformer Engine's op fuser under NeMo's Megatron-core LoRA "
                         f"(costs/te_ops.py): it needs lora.layout megatron (got {training.lora.layout}); "
                         "allowed here: false", file=file, key="training.te_op_fuser")
    if training.te_op_fuser and training.fp8_recipe != "transformer-engine":
        raise InputError("te_op_fuser is Transformer Engine's op fuser, whose saved casts are modelled for TE's delayed "
                         f"scaling (fp8_recipe transformer-engine) only, not {training.fp8_recipe} (costs/te_ops.py); "
                         "allowed here: false",
                         file=file, key="training.te_op_fuser")
    spec = finetune_spec(model, training.finetune, training.lora.rank, training.lora.targets,
                         training.lora.layout, training.lora.dropout, scenario.parallel.tp,
                         input_bytes=FP8_SAVED_BYTES if te_fp8 else 2.0, te_op_fuser=training.te_op_fuser)
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


def simulate_setup(setup: Setup, symmetric: bool | None = None, beside=None) -> Timeline:
    """One step played out; `symmetric` overrides how the setup was compiled (one rank per stage);
    `beside`: see `engine.simulate`."""
    return simulate(_charged_step(setup, symmetric).program, beside=beside)


def step_time_of(setup: Setup, symmetric: bool | None = None) -> float:
    """`simulate_setup(setup, symmetric).end_s`, the same float, without making the timeline."""
    return step_time_s(_charged_step(setup, symmetric).program)


def _charged_step(setup: Setup, symmetric: bool | None) -> CompiledStep:
    step = setup.step
    if symmetric is not None and symmetric == step.every_rank:
        step = compile_step(step.model, step.gpu, step.topology, step.plan, not symmetric, step.memo)
    charge(step_cost(step))                           # the command's answer budget (scalesim/limits.py)
    return step


def memory_of(setup: Setup) -> MemoryBreakdown:
    """Peak memory of the most loaded pipeline stage."""
    return setup.step.memory


def host_offload_bytes_per_node(setup: Setup) -> float:
    """What one node's host memory keeps: ZeRO-Offload's optimizer state (fp32 masters and moments)
    and, with offloaded weights, each GPU's share of the base weights as stored."""
    plan = setup.plan
    if not (plan.offload_optimizer or plan.offload_params):
        return 0.0
    per_node = len(setup.topology.ranks_by_server(tuple(range(setup.gpus)))[0])
    need = 0.0
    if plan.offload_optimizer:
        need += setup.step.optimizer_state_bytes()
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


