"""How many tasks a step will have, counted before building it (scalesim/limits.py bounds it).

Per simulated rank, stage by stage (its chunks' layers, as `model_chunks` cuts
them, so interleaved schedules' virtual stages count in full): for each
micro-batch, each layer runs a forward and a backward, plus its recompute,
each in parts (attention and MLP halves under tensor or context parallelism,
four parts for an MoE block) with their tensor-parallel calls, sequence-
parallel gathers and their layout copies, context-parallel exchanges, expert all-to-alls, ZeRO-3
gathers and reductions (with FSDP's copies and casts) and offloaded-weight fetches; each chunk receives and
sends its activations and gradients (four pipeline messages per chunk and
micro-batch) and, under FP8 delayed scaling, reduces its amaxes after each pass
(an all-reduce and an update, parallel/fp8_amax.py). Once per step: the gradient buckets' reductions, the optimizer
step (with its gradient-norm tasks where it clips on the host) and ZeRO-1/2 gathers. Every term is the most the builder
(scalesim/parallel/rank_program.py) can emit, so the count is an upper bound
of the built program's, within about 2x of it (tests/parallel/test_size.py
checks both on shipped and validation plans).
"""

from __future__ import annotations

from scalesim.costs.coalesced import param_tensors
from scalesim.costs.finetune import trainable_params
from scalesim.errors import InputError
from scalesim.limits import NETWORK_SECONDS_PER_GPU, TASKS_PER_SECOND, estimated_tasks
from scalesim.models.spec import LayerSpec, ModelSpec
from scalesim.parallel import mla_tp
from scalesim.parallel.experts import experts_whole
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.stages import model_chunks

GRAD_BYTES_PER_PARAM = 4.0      # fp32 gradients: the most buckets a plan can have
FIRST_BUCKETS_PER_CHUNK = 2     # DDP's small first bucket and the last, partly filled one


def _stage_layers(model: ModelSpec, plan: ParallelPlan) -> list[tuple[LayerSpec, ...]]:
    """Each pipeline stage's layers (all its chunks); an even split when the model cannot be cut
    (the plan is then refused elsewhere, with the reason)."""
    pp, v = plan.placement.pp, plan.chunks_per_stage
    try:
        chunks = model_chunks(model, plan.chunks, plan.pipeline_blocks)
    except InputError:
        per = -(-len(model.layers) // pp)
        return [tuple(model.layers[s * per:(s + 1) * per]) or model.layers[:1] for s in range(pp)]
    return [tuple(layer for c in range(v) for layer in chunks[c * pp + s]) for s in range(pp)]


def _layer_tasks(layer: LayerSpec, plan: ParallelPlan) -> tuple[int, int]:
    """(tasks per micro-batch, tasks once per step) of one layer on one rank, at most."""
    pl = plan.placement
    block = layer.kind == "transformer_block"
    moe = layer.expert_params > 0
    parts = 4 if moe else 2 if block and (pl.tp > 1 or pl.cp > 1) else 1
    split = parts > 1
    tp = int(split and pl.tp > 1)
    sp = int(tp and plan.sequence_parallel)
    cp = 2 if split and pl.cp > 1 else 0                     # the K/V gather and its sync
    a2a = 2 if moe and pl.ep > 1 else 0
    if moe:     # TP calls after the attention part and the last; SP gathers before the first one or two
        whole = experts_whole(pl)
        tp_calls, sp_gathers = tp * (1 + (not (whole and sp))), sp * (1 if whole else 2)
    else:
        tp_calls, sp_gathers = parts * tp, parts * sp
    copies = sp * (plan.sequence_parallel_layout == "batch-first")     # one per SP call (parallel/sp_layout.py)
    latents = mla_tp.CALLS_PER_PASS * _latents(layer, plan, sp)       # parallel/mla_tp.py
    forward = parts + (tp_calls + sp_gathers) * (1 + copies) + cp + a2a + latents
    backward = parts + tp_calls * (1 + 2 * copies) + cp + a2a + latents
    if plan.tp_overlap is not None and sp and not moe and not copies:   # parallel/tp_overlap.py, per half:
        forward += 5 * parts        # 5 computes and 3 calls instead of 1 and 2
        backward += 8 * parts       # 7 computes and 3 calls instead of 1 and 1
    elif sp and not copies and plan.finetune is None and plan.sp_backward == "split":
        # parallel/sp_backward.py, tp_async.py, per part:
        regathered = 1 if moe else parts
        backward += (6 + plan.tp_async) * regathered    # 5 (6) computes and 3 calls instead of 1 and 1
        forward += 3 * regathered * plan.tp_async       # 4 computes and 2 calls instead of 1 and 2
    recompute = {"full": forward, "none": 0}.get(plan.checkpointing, 1)
    recompute += 2 * bool(latents) * (plan.checkpointing == "selective" and "mla_up_proj" in plan.recompute_modules)
    if plan.checkpointing == "selective" and moe and "moe" in plan.recompute_modules:
        recompute = forward         # the MoE layer replayed whole, all-to-alls included (rank_program.py)
    if plan.checkpointing == "selective-op":     # both halves' inputs gathered again (rank_program.py _regather)
        recompute += 2 * sp * (1 + copies)
    shards = pl.dp * pl.cp > 1
    # FSDP's kernels (parallel/fsdp.py): FSDP2 copies each gathered unit out, either version passes over
    # each gradient before its reduce-scatter (FSDP1 twice: the flat gradient's cat, the cast and divide);
    # HSDP all-reduces each reduced shard across the replicas; either version's unshard hook is a task of its own
    # before each all-gather (parallel/fsdp_limiter.py)
    gathers = (1 + moe + (plan.fsdp_version == 2) + (plan.fsdp_version is not None)) * (plan.zero >= 3 and shards) \
        + plan.offload_params
    reductions = (1 + moe + (plan.fsdp_version is not None) + (plan.fsdp_version == 1)
                  + (plan.hsdp_shard is not None)) if plan.zero >= 3 and shards else 0
    per_micro_batch = forward + backward + recompute + 2 * gathers + reductions
    once = (1 + moe) * (plan.zero in (1, 2) and plan.overlap_param_gather and shards) + moe
    return per_micro_batch, once


def _latents(layer: LayerSpec, plan: ParallelPlan, sp: int) -> bool:
    """MLA's latent calls apply: sequence parallelism, column-parallel down-projections and an MLA
    layer (its ops scanned only when the rest holds)."""
    return bool(sp and plan.mla_down_proj == "column-parallel" and any(op.name == "mla_q_down" for op in layer.ops))


def _bucket_count(layers: tuple[LayerSpec, ...], plan: ParallelPlan) -> float:
    """Tasks of the DDP buckets one rank reduces per step (fp32 gradients: the most buckets there can be)."""
    pl = plan.placement
    if plan.zero >= 3 or pl.dp * pl.cp <= 1:
        return 0.0
    dense = sum((layer.params if plan.finetune is None else trainable_params(layer, plan.finetune))
                - (layer.expert_params if plan.finetune is None else 0) for layer in layers)
    buckets = dense / pl.tp * GRAD_BYTES_PER_PARAM / plan.bucket_bytes + FIRST_BUCKETS_PER_CHUNK * plan.chunks_per_stage
    nanotron = plan.grad_accumulation == "fp32-add" and plan.zero == 0
    # the tensors are counted only where they bound the buckets (a sweep sizes thousands of plans)
    tensors = float(sum(param_tensors(layer) for layer in layers)) if nanotron or plan.bucket_params is not None else 0.0
    if nanotron:      # nanotron: an all-reduce per tensor
        buckets = max(buckets, tensors)
    per_bucket = 1 + 2 * plan.zero1_over_ddp + 2 * plan.grad_nan_check   # nanotron ZeRO-1: flatten, call, shard
    if plan.bucket_params is not None:         # copy; NaN check: two kernels (parallel/megatron_dp.py)
        # Megatron-Core's buckets of whole tensors, each closing at bucket_params of the rank's parameters
        buckets = min(tensors, dense / pl.tp / plan.bucket_params + plan.chunks_per_stage)
        if plan.zero in (1, 2):     # per-rank views before each reduce-scatter, and each bucket's own
            per_bucket += 1 + 2 * plan.overlap_param_gather       # views and all-gather in the forward
    return buckets * per_bucket


def step_counts(model: ModelSpec, plan: ParallelPlan, ranks: int) -> dict:
    """Keyword arguments of `scalesim.limits.check_step_size` for `ranks` simulated ranks (the most
    loaded stage's counts, for every rank)."""
    pl = plan.placement
    v = plan.chunks_per_stage
    per_mb, once, layer_count, buckets = 0, 0, 0, 0.0
    sp = int(plan.sequence_parallel and pl.tp > 1)
    known: dict[tuple, tuple[int, int]] = {}    # what _layer_tasks reads of a layer -> its counts
    for layers in _stage_layers(model, plan):
        counts = [known[key] if (key := (layer.kind, layer.expert_params > 0, _latents(layer, plan, sp))) in known
                  else known.setdefault(key, _layer_tasks(layer, plan)) for layer in layers]
        messages = 4 * v if pl.pp > 1 else 0
        messages += 4 * v * (plan.fp8_delayed_scaling and plan.precision == "fp8")   # amax call + update a pass
        messages += plan.loss_check_host_sync       # HF Trainer's loss check a micro-batch (parallel/step_syncs.py)
        stage_mb = sum(c[0] for c in counts) + messages
        stage_once = sum(c[1] for c in counts) + 3 + 2 * (plan.zero in (1, 2))   # optimizer (offloaded: 3)
        stage_once += 4 * plan.grad_clip_host_sync          # its norm, all-reduce, read and tail (optimizer_tail.py)
        stage_buckets = _bucket_count(layers, plan)
        if stage_mb * plan.micro_batches + stage_once + stage_buckets > \
                per_mb * plan.micro_batches + once + buckets:
            per_mb, once, layer_count, buckets = stage_mb, stage_once, len(layers), stage_buckets
    return {"ranks": ranks, "micro_batches": plan.micro_batches, "layers_per_rank": layer_count,
            "tasks_per_micro_batch": per_mb, "tasks_per_step": once, "buckets_per_rank": buckets,
            "bucket_key": "parallel.bucket_mb" if plan.bucket_params is None else "parallel.bucket_params"}


def compiled_tasks(step, every_rank: bool | None = None) -> float:
    """Estimated tasks of a compiled step (scalesim/parallel/step.py) as it will be simulated
    (`every_rank`: as if compiled that way instead)."""
    pl = step.plan.placement
    every_rank = step.every_rank if every_rank is None else every_rank
    return estimated_tasks(**step_counts(step.model, step.plan, pl.size if every_rank else pl.pp))


def step_cost(step) -> float:
    """What simulating a compiled step costs, in estimated tasks: its tasks (`compiled_tasks`) and,
    as many tasks' worth, the playing out of its collectives over its GPUs (NETWORK_SECONDS_PER_GPU)."""
    return compiled_tasks(step) + NETWORK_SECONDS_PER_GPU * TASKS_PER_SECOND * step.plan.placement.size
