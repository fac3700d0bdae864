"""`training.framework`: the training code a scenario runs, as a preset of defaults for existing keys.

Several keys each describe one framework's code (the host reading the gradient norm, Megatron-DeepSpeed's
per-layer sync, nanotron's kernels, torchtitan's separate projections, ...), and each key's own default is
right for one framework only. Naming the framework sets all of them at once: every row of `PRESETS` is a
DEFAULT, applied only where the scenario does not write the key (a key the user writes always wins) and only
where its condition on the plan holds. null (the default) sets nothing: today's behaviour exactly.
`REFUSALS` are plans the framework's code cannot run (exit 2 naming the key and what is allowed).

Each value names the code it is read from (repo@commit file:line). Names the existing keys cannot tell
apart are left out: plain PyTorch DDP / FSDP scripts set nothing the defaults do not already (their model
code is the user's), so there is no `pytorch-ddp` or `pytorch-fsdp` row.
Pure data and functions; the Scenario applies them before its sections are validated.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

from scalesim.errors import ALLOWED_KEYS, InputError

Getter = Callable[[str], Any]


def _zero(*stages: int) -> Callable[[Getter], bool]:
    return lambda get: get("parallel.zero") in stages


def _above_one(key: str) -> Callable[[Getter], bool]:
    return lambda get: isinstance(get(key), int) and get(key) > 1


def _precision(name: str) -> Callable[[Getter], bool]:
    return lambda get: get("training.precision") == name


def _ddp_zero1(get: Getter) -> bool:
    """nanotron wraps a ZeRO-1 model in DDP only without fp32 accumulation (trainer.py:797-799 @67c5ebb6)."""
    return get("parallel.zero") == 1 and get("parallel.grad_accumulation") != "fp32-add"


def _always(get: Getter) -> bool:
    return True


def _sixteen_bit(get: Getter) -> bool:
    return get("training.precision") in ("fp16", "bf16")


@dataclass(frozen=True)
class Default:
    """`key` ("section.name") takes `value` when the scenario does not write it and `when` holds."""

    key: str
    value: Any
    source: str
    when: Callable[[Getter], bool] = _always


@dataclass(frozen=True)
class Refusal:
    """A value of `key` the framework's code cannot run: `refused(get)` says when; `message` what is allowed."""

    key: str
    refused: Callable[[Getter], bool]
    message: str


_MCORE_CLIP = ("NVIDIA/Megatron-LM 25.09-alpha.rc1 megatron/core/optimizer/clip_grads.py:133 get_grad_norm_fp32 "
               "`total_norm.item()`, reached from MixedPrecisionOptimizer.step (optimizer.py:589-616), which the "
               "distributed optimizer (zero 1/2) and Float16OptimizerWithFloat16Params (zero 0) both run; clip_grad "
               "defaults to 1.0 (Megatron-LM and NeMo)")
_MCORE = (
    Default("training.grad_clip_host_sync", True, _MCORE_CLIP, _zero(0, 1, 2)),
    Default("training.saved_activations", "transformer-engine",
            "Megatron-Core's layers are Transformer Engine modules (get_gpt_layer_with_transformer_engine_spec; "
            "scalesim/costs/memory.py SAVED_ACTIVATIONS): as megatron, plus the FP8 linears' FP8 input copies"),
)
# DeepSpeed's ZeRO-1/2 (deepspeedai/DeepSpeed, deepspeed/runtime/zero/stage_1_and_2.py) computes the norm as a
# device tensor since "Optimize grad_norm calculations by reducing device/host dependency" (#4974, 61daaa1e,
# v0.13.2, Feb 2024; before, get_grad_norm_direct read it with `.item()`). Its overflow check still reads a flag on
# the host (has_overflow `overflow_gpu[0].item()`, @edaa7221 stage_1_and_2.py:2481) in fp16, and in bf16 again
# since v0.19.3 (#8035, check_grad_overflow default true). Even there the update after the read runs over one flat
# fp32 partition per parameter group (single_partition_of_fp32_groups): a handful of dispatches, not the per-tensor
# loop costs/optimizer_tail.py counts for Megatron-Core, so false is the closer of the two.
_DS_CLIP = Default("training.grad_clip_host_sync", False,
                   "deepspeedai/DeepSpeed v0.13.2+ (61daaa1e, #4974) stage_1_and_2.py scaled_global_norm: the norm "
                   "stays a device tensor; the update runs over flat fp32 partitions (see frameworks.py)")
_TT = "pytorch/torchtitan@9dec370"
_NANO = "huggingface/nanotron@67c5ebb6"

PRESETS: dict[str, tuple[Default, ...]] = {
    "megatron-core": _MCORE,
    # NeMo 2 trains Megatron-Core's GPTModel with the Transformer Engine layer spec: the same code
    "nemo": _MCORE,
    "megatron-deepspeed": (
        Default("training.attention", "fused",
                "microsoft/Megatron-DeepSpeed@0d6e3793 megatron/arguments.py:927-933 (--use-flash-attn-v1/v2/triton "
                "off by default), megatron/model/transformer.py:518 and :264 (CoreAttention's FusedScaleMaskSoftmax); "
                "the framework prices the legacy layer's calls with any attention (costs/megatron_host.py)"),
        Default("training.layer_forward_host_sync", True,
                "microsoft/Megatron-DeepSpeed@0d6e3793 megatron/model/transformer.py:1337-1338 (torch.tensor(0.0, "
                "device=...) in every layer's forward; parallel/layer_sync.py)"),
        Default("training.grad_clip_host_sync", False,
                "microsoft/Megatron-DeepSpeed@0d6e3793 megatron/training.py:746 (model[0].step(): DeepSpeed's engine "
                "clips and updates) + " + _DS_CLIP.source),
        # the loss over fp32 logits: nanotron's kernels and peak (costs/nanotron_kernels.py LOSS_KERNELS, loss_memory.py)
        Default("training.cross_entropy", "fp32-upcast",
                "microsoft/Megatron-DeepSpeed@0d6e3793 megatron/model/gpt_model.py:60 cross_entropy(output.float(), "
                "labels) (--fp16-lm-cross-entropy off by default, arguments.py:1131); the pipeline model's "
                "float16_to_fp32 (:431) and CrossEntropy (:306); megatron/core/tensor_parallel/cross_entropy.py:20-68 "
                "(max, out-of-place shift, exp, sum, div_ over the fp32 logits), :124 (backward mul_)", _sixteen_bit),
    ),
    "deepspeed": (_DS_CLIP,),
    "nanotron": (
        Default("training.attention", "flash2", f"{_NANO} src/nanotron/models/llama.py:286 flash_attn_varlen_func "
                "(the flash-attn 2 package)"),
        Default("training.elementwise_kernels", "nanotron", f"{_NANO} src/nanotron/models/llama.py (eager SwiGLU, "
                "q/k/v layout copies; scalesim/costs/nanotron_kernels.py)"),
        Default("training.saved_activations", "nanotron", f"{_NANO} src/nanotron/models/llama.py (SiLU output and "
                "k, v copies kept; scalesim/costs/memory.py)"),
        Default("training.cross_entropy", "fp32-upcast", f"{_NANO} src/nanotron/models/llama.py:971 "
                "sharded_cross_entropy(..., dtype=torch.float)"),
        # trainer.py:797-799 builds no DDP when accumulate_grad_in_fp32 and zero_stage > 0 (grad_accumulation:
        # fp32-add, as scaling_benchmarks.py runs): zero1_over_ddp stays false and the fp32 buffer is all-reduced
        # after the whole backward (trainer.py:525-534, gradient_accumulator.py:155; parallel/nanotron_dp.py).
        Default("parallel.zero1_over_ddp", True, f"{_NANO} src/nanotron/trainer.py:856-865 (DistributedDataParallel "
                "wraps the model at ZeRO-1 unless accumulate_grad_in_fp32: trainer.py:797-799), helpers.py:381 "
                "(ZeroDistributedOptimizer)", _ddp_zero1),
        Default("training.grad_clip_host_sync", False, f"{_NANO} src/nanotron/optim/clip_grads.py:63-80 clip_grad_norm "
                "(the norm a device tensor, clamped on the device: no host read), called from trainer.py:551"),
        Default("parallel.pipeline_balance", "nanotron", f"{_NANO} src/nanotron/models/base.py:190 build_model "
                "(blocks placed by compute cost; scalesim/parallel/cost_balance.py)"),
    ),
    "torchtitan": (
        Default("training.fused_projections", False, f"{_TT} torchtitan/models/llama/model.py:158 (wq, wk, wv) and "
                ":248-250 (w1, w3): separate nn.Linear"),
        Default("training.elementwise_kernels", "eager", f"{_TT} torchtitan/config_manager.py:399 (--training.compile "
                "off by default): RMSNorm, RoPE and SwiGLU run eagerly (scalesim/costs/eager.py)"),
        Default("training.cross_entropy", "loss-parallel", f"{_TT} train.py:131 loss_fn under loss_parallel(), "
                "parallel_dims.py:119-121 (tp > 1 unless disabled)", _above_one("parallel.tp")),
        Default("training.cross_entropy", "eager", f"{_TT} train.py:131-134 F.cross_entropy(pred.float())"),
        Default("training.fp8_recipe", "torchao-tensorwise", f"{_TT} torchtitan/config_manager.py:533-565 (torchao "
                "Float8Linear, dynamic tensorwise scaling)", _precision("fp8")),
        Default("parallel.sequence_parallel", True, f"{_TT} torchtitan/parallelisms/parallelize_llama.py:137,176,185 "
                "(SequenceParallel() norms in every TP plan)", _above_one("parallel.tp")),
        Default("parallel.sequence_parallel_layout", "batch-first", f"{_TT} parallelize_llama.py apply_tp: DTensor "
                "Shard(1) of (batch, seq, hidden) (scalesim/parallel/sp_layout.py)"),
        Default("parallel.tp_recompute_allgather", False, f"{_TT} parallelize_llama.py apply_tp: ColwiseParallel keeps "
                "its gathered input for the weight gradient",
                lambda get: _above_one("parallel.tp")(get) and get("parallel.sequence_parallel") is True
                and not get("parallel.tp_comm_overlap")),
        Default("parallel.cp_comm_type", "torch_ring", f"{_TT} torchtitan/config_manager.py:365-367 (torch's "
                "experimental ring, rotate method allgather; scalesim/parallel/torch_ring.py)", _above_one("parallel.cp")),
        Default("parallel.fsdp_version", 2, f"{_TT} parallelize_llama.py:309-339 apply_fsdp (FSDP2 fully_shard)",
                _zero(3)),
        Default("parallel.fsdp_keep_last_block", True, f"{_TT} parallelize_llama.py:329-333 (the last block not "
                "resharded after forward without PP)", lambda get: get("parallel.zero") == 3 and get("parallel.pp") == 1
                and get("parallel.fsdp_version") == 2),
        Default("parallel.grad_reduce_dtype", "fp32", f"{_TT} torchtitan/config_manager.py:389 "
                "(mixed_precision_reduce float32, FSDP2's MixedPrecisionPolicy reduce_dtype)", _zero(3)),
    ),
    "hf-trainer": (
        Default("training.elementwise_kernels", "eager", "huggingface/transformers@00227283 src/transformers/models/"
                "llama/modeling_llama.py LlamaRMSNorm.forward, apply_rotary_pos_emb, LlamaMLP.forward: eager "
                "PyTorch ops (no effect on models without RMSNorm, RoPE or SwiGLU)"),
        Default("training.grad_clip_host_sync", False, "Trainer clips with accelerate's clip_grad_norm_ (torch's "
                "clip_grad_norm_, a device tensor) or, under DeepSpeed, the engine's (the deepspeed row)"),
        Default("training.loss_check_host_sync", True, "huggingface/transformers v5.25.0 src/transformers/trainer.py:"
                "1956-1959 (logging_nan_inf_filter, default True at training_args.py:1022-1023: the truth value of "
                "torch.isnan(tr_loss_step) after every training_step; parallel/step_syncs.py)"),
    ),
    "llm-foundry": (
        Default("parallel.fsdp_version", 1, "mosaicml/composer@008dac70 composer/utils/parallelism.py FSDPConfig "
                "(torch's FullyShardedDataParallel)", _zero(3)),
        Default("parallel.fsdp_backward_prefetch", "post", "mosaicml/composer@008dac70 composer/utils/parallelism.py:21 "
                "backward_prefetch 'BACKWARD_POST'", _zero(3)),
    ),
}
FRAMEWORKS = tuple(PRESETS)
Framework = Literal["megatron-core", "nemo", "megatron-deepspeed", "deepspeed", "nanotron", "torchtitan",
                    "hf-trainer", "llm-foundry"]


def _set(key: str) -> Callable[[Getter], bool]:
    return lambda get: get(key) not in (None, False)


_NOT_NANOTRON = Refusal("parallel.zero1_over_ddp", _set("parallel.zero1_over_ddp"),
                        "zero1_over_ddp is nanotron's ZeRO-1 inside DDP; allowed with framework {name}: false")
_DS_ZERO3 = Refusal("parallel.fsdp_version", _set("parallel.fsdp_version"),
                    "framework {name} runs DeepSpeed's own ZeRO-3 (flat buffers), not PyTorch FSDP; allowed: null")
REFUSALS: dict[str, tuple[Refusal, ...]] = {
    "nanotron": (Refusal("parallel.zero", _zero(2, 3), "nanotron shards the optimizer state only: any zero_stage > 0 "
                         f"builds its ZeroDistributedOptimizer ({_NANO} src/nanotron/helpers.py:381); allowed with "
                         "framework nanotron: 0, 1"),
                 Refusal("parallel.zero1_over_ddp", lambda get: _set("parallel.zero1_over_ddp")(get)
                         and get("parallel.grad_accumulation") == "fp32-add", "nanotron builds no DDP when it "
                         f"accumulates in fp32 at ZeRO-1 ({_NANO} src/nanotron/trainer.py:797-799 make_ddp): with "
                         "grad_accumulation fp32-add allowed with framework nanotron: false (or leave it out)")),
    "torchtitan": (Refusal("parallel.zero", _zero(1, 2), f"torchtitan shards with FSDP2 or replicates with DDP ({_TT} "
                           "parallelize_llama.py:309 apply_fsdp, :342 apply_ddp), with no ZeRO-1/2 optimizer; allowed "
                           "with framework torchtitan: 0, 3"),
                   Refusal("parallel.fsdp_version", lambda get: get("parallel.fsdp_version") == 1,
                           f"torchtitan's FSDP is FSDP2 ({_TT} parallelize_llama.py:309 fully_shard); allowed with "
                           "framework torchtitan: 2 (or leave it out)"),
                   _NOT_NANOTRON),
    "deepspeed": (_DS_ZERO3, _NOT_NANOTRON),
    "megatron-deepspeed": (_DS_ZERO3, _NOT_NANOTRON),
}
for _name in FRAMEWORKS:
    if _name not in ("nanotron", "torchtitan", "deepspeed", "megatron-deepspeed"):
        REFUSALS[_name] = (_NOT_NANOTRON,)


def zero_stages(name: str | None, stages: tuple[int, ...] = (0, 1, 2, 3)) -> tuple[int, ...]:
    """The ZeRO stages of `stages` that framework `name`'s code runs (those its REFUSALS leave; all without a
    framework): a search tries only these, as the others are refused (nanotron 0-1, torchtitan 0 and 3)."""
    refusals = [r for r in REFUSALS.get(name or "", ()) if r.key == "parallel.zero"]
    return tuple(z for z in stages
                 if not any(r.refused(lambda key, z=z: z if key == "parallel.zero" else None) for r in refusals))


def fsdp_version_at(scenario, zero: int) -> int | None:
    """The parallel.fsdp_version a plan of `scenario` changed to ZeRO stage `zero` runs, as `with_changes` resolves
    it: none below 3; at 3 the scenario's own when it is at 3 (written, or its framework's), else its framework's
    for zero 3 (torchtitan's FSDP2, llm-foundry's FSDP1), else null (DeepSpeed's ZeRO-3)."""
    if zero != 3:
        return None
    if scenario.parallel.zero == 3:
        return scenario.parallel.fsdp_version

    def get(key: str) -> Any:
        section, field = key.split(".")
        return zero if key == "parallel.zero" else getattr(getattr(scenario, section), field)
    return next((row.value for row in PRESETS.get(scenario.training.framework or "", ())
                 if row.key == "parallel.fsdp_version" and row.when(get)), None)


def with_framework_defaults(data: Any, defaults: Callable[[str], Any], coerce: Callable[[str, Any], Any] = lambda k, v: v
                            ) -> tuple[Any, tuple[tuple[str, Any], ...]]:
    """`data` (a scenario mapping, before validation) with its framework's defaults filled in, and the
    (key, value) pairs set. `defaults(key)`: a key's own default; `coerce(key, value)`: a written value as the
    schema will read it (`tp: "2"` is 2, `zero: 3.0` is 3), so that conditions and refusals see what the plan
    runs. Raises InputError for a refused value.
    Anything but a mapping, or an unknown framework name (the schema refuses it), passes unchanged."""
    training = data.get("training") if isinstance(data, dict) else None
    name = training.get("framework") if isinstance(training, dict) else None
    if not isinstance(name, str) or name not in PRESETS:
        return data, ()
    sections = {s: dict(data.get(s) or {}) if isinstance(data.get(s) or {}, dict) else None
                for s in ("training", "parallel")}
    if sections["parallel"] is None:       # not a mapping: the schema reports it
        return data, ()

    def get(key: str) -> Any:
        section, field = key.split(".")
        return coerce(key, sections[section][field]) if field in sections[section] else defaults(key)

    for refusal in REFUSALS.get(name, ()):
        if refusal.refused(get):
            raise InputError(refusal.message.format(name=name), key=refusal.key)
    applied = []
    for row in PRESETS[name]:
        section, field = row.key.split(".")
        if field not in sections[section] and row.when(get):
            sections[section][field] = row.value
            applied.append((row.key, row.value))
    return {**data, **sections} if applied else data, tuple(applied)


def without_framework_defaults(data: dict, applied: tuple[tuple[str, Any], ...]) -> dict:
    """A dumped scenario mapping without the keys its framework set, so that a changed plan takes them anew."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, _ in applied:
        section, field = key.split(".")
        out.get(section, {}).pop(field, None)
    return out


def blame_preset(error: InputError, name: str | None, applied: tuple[tuple[str, Any], ...]) -> InputError:
    """`error` saying, for each key of `applied` (what framework `name`'s preset set) that it is at or names
    (`section.field`; a field with an underscore as a word; a one-word field followed by ':' or its value), that
    the user did not write that value: '...; sequence_parallel_layout is batch-first (set by training.framework:
    torchtitan; write it to override)'. `error` itself when it names none."""
    notes = ""
    cause = error.detail.partition(ALLOWED_KEYS)[0]       # an unknown key's list of every key is no cause
    for key, value in applied:
        section, field = key.split(".")
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        bare = rf"(?<![\w.]){field}(?!\w)" if "_" in field else rf"(?<![\w.]){field}(?=: | {re.escape(shown)}\b)"
        if key == error.key or re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)|{bare}", cause):
            notes += f"; {field} is {shown} (set by training.framework: {name}; write it to override)"
    return error.with_detail(error.detail + notes) if notes else error


def blames_framework(prepare: Callable) -> Callable:
    """`prepare(scenario, ...)` whose input errors say which of the keys they name the scenario's framework set
    (`blame_preset`): a model or GPU the preset's kernels do not fit is found only once names are resolved."""
    @functools.wraps(prepare)
    def prepared(scenario, *args, **kwargs):
        try:
            return prepare(scenario, *args, **kwargs)
        except InputError as exc:
            blamed = blame_preset(exc, scenario.training.framework, scenario._framework_set)
            if blamed is exc:
                raise
            raise blamed from None
    return prepared


def framework_summary(name: str | None, applied: tuple[tuple[str, Any], ...]) -> dict:
    """`plan.framework` and `plan.framework_defaults` for `run`'s result ({} without a framework)."""
    return {} if name is None else {"framework": name, "framework_defaults": dict(applied)}
