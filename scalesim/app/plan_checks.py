"""The checks a scenario's parallel plan must pass before anything is built (what Megatron-LM,
DeepSpeed or nanotron would refuse, each naming the key and what would work), and the pipeline's
blocks per chunk that some of them need."""

from __future__ import annotations

from scalesim.errors import InputError
from scalesim.models import ModelSpec
from scalesim.parallel.cost_balance import nanotron_blocks
from scalesim.parallel.cp_a2a import head_split_problem
from scalesim.parallel.cp_exchange import windowed
from scalesim.parallel.stages import pipeline_blocks
from scalesim.scenario import Scenario

# Each micro-batch of a step is simulated as its own tasks (about 1,000 micro-batches a
# second on one core for an 8-GPU data-parallel step); real recipes use tens to a few
# hundred. Beyond this a typo (a global batch in tokens, say) would run for hours or
# exhaust memory instead of failing.
MAX_MICRO_BATCHES = 4096


def check_plan(scenario: Scenario, model: ModelSpec, count: int, dp: int, file: str | None) -> None:
    """Refuse plans Megatron/DeepSpeed would refuse, naming the key and what would work."""
    par, training = scenario.parallel, scenario.training

    def bad(key: str, message: str) -> InputError:
        return InputError(message, file=file, key=key)

    if dp * par.tp * par.pp * par.cp != count:
        model_ways = par.tp * par.pp * par.cp
        fix = (f"set parallel.dp to {count // model_ways}, or leave it out (it is then GPUs / (tp x pp x cp))"
               if count % model_ways == 0 else f"the GPUs must be a multiple of tp x pp x cp ({model_ways})")
        raise bad("parallel.dp", f"dp x tp x pp x cp = {dp} x {par.tp} x {par.pp} x {par.cp} = "
                  f"{dp * par.tp * par.pp * par.cp}, but the scenario has {count} GPUs; they must be equal: {fix}")
    model_parallel = par.tp > 1 or par.pp > 1 or par.cp > 1
    if model_parallel and not model.num_layers or model_parallel and model.tokens_per_sample is None:
        raise bad("parallel", f"tensor, pipeline and context parallelism need a token transformer; "
                  f"{model.name} is a vision model: use dp (and zero) only")
    if model.heads and model.heads % par.tp:
        raise bad("parallel.tp", f"tp ({par.tp}) must divide the attention heads ({model.heads}); "
                  f"allowed: {', '.join(str(t) for t in range(1, model.heads + 1) if model.heads % t == 0 and t <= 64)}")
    if model.kv_heads and model.kv_heads % par.tp and par.tp % model.kv_heads:
        raise bad("parallel.tp", f"tp ({par.tp}) and the key/value heads ({model.kv_heads}) must divide one another")
    check_cp_comm(par, model, bad)
    check_experts(scenario, model, dp, file)
    check_framework_keys(par, bad)
    shard = par.hsdp_shard
    if shard is not None and (dp > shard and dp % shard or model_parallel or model.moe is not None):
        divisors = ", ".join(str(d) for d in range(1, dp + 1) if dp % d == 0)
        allowed = "null" if model_parallel or model.moe is not None else f"{divisors} (or null)"
        raise bad("parallel.hsdp_shard", f"HSDP shards over hsdp_shard data-parallel ranks and replicates across "
                  f"the rest (over all of them when dp is not larger): it must divide dp ({dp}), with tp, pp "
                  f"and cp 1 and a dense model (got hsdp_shard {shard}, tp {par.tp}, pp {par.pp}, cp {par.cp}); "
                  f"allowed here: {allowed}")
    if par.fp8_param_gather and training.precision != "fp8":
        raise bad("parallel.fp8_param_gather", f"fp8_param_gather needs training.precision: fp8 (got "
                  f"{training.precision})")
    if par.virtual_stages > 1 and par.pp_schedule != "interleaved":
        raise bad("parallel.virtual_stages", "virtual_stages > 1 needs pp_schedule: interleaved")
    if par.pp_schedule == "interleaved" and par.pp == 1:
        raise bad("parallel.pp_schedule", "the interleaved schedule needs pp > 1")
    if par.pipeline_balance == "nanotron" and par.pp_schedule == "interleaved":
        raise bad("parallel.pipeline_balance", "nanotron places one chunk per stage: use pp_schedule 1f1b or gpipe")
    try:
        pipeline_blocks_of(par, model)
    except InputError as exc:
        raise exc.located(file=file) from None
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


def check_cp_comm(par, model: ModelSpec, bad) -> None:
    """Context parallelism's exchange must run the model's attention: no window on a ring, the heads split
    evenly over the all-to-all."""
    if par.cp > 1 and par.cp_comm_type in ("p2p", "torch_ring") and windowed(model):      # parallel/cp_exchange.py
        raise bad("parallel.cp_comm_type", f"{model.name} has sliding windows, which Transformer Engine's p2p "
                  "context parallelism refuses (attn_forward_func_with_cp asserts it) and PyTorch's ring has no "
                  "window (SDPA's is_causal only); allowed: all_gather or a2a")
    if par.cp > 1 and par.cp_comm_type == "a2a" and (problem := head_split_problem(model, par.tp, par.cp)):
        raise bad("parallel.cp_comm_type", problem)                                   # parallel/cp_a2a.py


def check_framework_keys(par, bad) -> None:
    """Keys of one framework's way of running a plan, refused where the plan would ignore or misapply
    them (`bad(key, message)` makes the InputError)."""
    if not par.tp_recompute_allgather and not (par.sequence_parallel and par.tp > 1):
        raise bad("parallel.tp_recompute_allgather", "only sequence-parallel linears all-gather their input: "
                  "false needs sequence_parallel: true and tp > 1; allowed here: true")
    if not par.tp_recompute_allgather and par.tp_comm_overlap:
        raise bad("parallel.tp_recompute_allgather", "Transformer Engine's userbuffers overlap gathers each half's "
                  "input again for its weight gradient (parallel/tp_overlap.py): false needs tp_comm_overlap: "
                  "false; allowed with it: true")
    for key, value, what in (("param_gather_with_optimizer_step", par.param_gather_with_optimizer_step,
                              "dispatches the distributed optimizer's overlapped parameter all-gathers with the update"),
                             ("align_param_gather", par.align_param_gather,
                              "aligns the distributed optimizer's overlapped parameter all-gathers")):
        if value and not (par.overlap_param_gather and par.zero in (1, 2)):
            raise bad(f"parallel.{key}", f"Megatron-Core {what}: true needs zero: 1 or 2 and "
                      f"overlap_param_gather: true (got zero: {par.zero}, overlap_param_gather: "
                      f"{str(par.overlap_param_gather).lower()}); allowed otherwise: false")
    if par.param_gather_with_optimizer_step and not interleaved(par):
        # Megatron-LM asserts it (megatron/training/arguments.py @d98e8a64, validate_args: "only supported
        # with interleaved pipeline parallelism"); NeMo's and Megatron-Bridge's recipes set it only with vp > 1
        raise bad("parallel.param_gather_with_optimizer_step", "Megatron-LM runs overlap_param_gather_with_"
                  "optimizer_step only with interleaved pipeline parallelism: true needs pp_schedule: interleaved "
                  f"and virtual_stages > 1 (got pp_schedule: {par.pp_schedule}, virtual_stages: "
                  f"{par.virtual_stages}); allowed otherwise: false")
    if par.fsdp_keep_last_block and par.pp > 1:
        # torchtitan's apply_fsdp keeps the last block gathered only without PP; with PP its default policy
        # reshards no block after forward (reshard_after_forward = False), which this key does not model
        raise bad("parallel.fsdp_keep_last_block", "torchtitan keeps the last transformer block gathered only "
                  "without pipeline parallelism (parallel/fsdp.py regathered): true needs pp: 1 (got pp: "
                  f"{par.pp}); allowed otherwise: false")
    for key, value in (("bucket_params", par.bucket_params is not None), ("grad_nan_check", par.grad_nan_check)):
        if value and par.zero == 3:
            raise bad(f"parallel.{key}", f"{key} is Megatron-Core's data-parallel gradient buckets' (parallel/"
                      "megatron_dp.py); ZeRO-3 reduces each unit's gradients by itself, with no such buckets: "
                      f"needs zero 0, 1 or 2; allowed with zero: 3: {'null' if key == 'bucket_params' else 'false'}")
    if par.pp_scatter_gather and par.pp_schedule == "gpipe":
        raise bad("parallel.pp_scatter_gather", "Megatron-LM of 2021 scatter-gathers the P2P tensors of its 1F1B "
                  "and interleaved schedules (parallel/p2p_batched.py): pp_scatter_gather needs pp_schedule 1f1b "
                  "or interleaved; allowed with gpipe: false")


def interleaved(par) -> bool:
    """The plan runs Megatron's interleaved schedule with virtual stages (Megatron-LM sets
    virtual_pipeline_model_parallel_size to None at 1, arguments.py)."""
    return par.pp_schedule == "interleaved" and par.virtual_stages > 1


def check_experts(scenario: Scenario, model: ModelSpec, dp: int, file: str | None) -> None:
    """Expert parallelism needs an MoE model, and ep must divide the experts and dp x cp."""
    ep, cp, tp, etp = scenario.parallel.ep, scenario.parallel.cp, scenario.parallel.tp, scenario.parallel.etp
    given = scenario.training.moe_imbalance
    if model.moe is not None and given is not None and given > model.moe.experts / model.moe.top_k:
        most = model.moe.experts / model.moe.top_k      # every token's top_k experts the same ones (1e300 overflowed)
        raise InputError(f"{given:g} is more than the busiest expert can receive: every token once, {most:g} x the mean "
                         f"with {model.moe.experts} experts and top_k {model.moe.top_k}; allowed: 1 to {most:g}",
                         file=file, key="training.moe_imbalance")
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


def pipeline_blocks_of(par, model: ModelSpec) -> tuple[int, ...] | None:
    """Blocks per pipeline chunk from the scenario's layout keys or nanotron's placement (None: the
    even split)."""
    if par.pipeline_balance == "nanotron":
        if par.pipeline_layout is not None or par.decoder_first_pipeline_num_layers is not None \
                or par.decoder_last_pipeline_num_layers is not None:
            raise InputError("pipeline_balance: nanotron places the blocks itself; give it or a pipeline "
                             "layout, not both", key="parallel.pipeline_balance")
        return nanotron_blocks(model, par.pp) if par.pp > 1 else None
    return pipeline_blocks(model, par.pp, par.virtual_stages if par.pp_schedule == "interleaved" else 1,
                           par.pipeline_layout, par.decoder_first_pipeline_num_layers,
                           par.decoder_last_pipeline_num_layers)
