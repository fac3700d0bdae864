"""Scenario files: validated and typed, with defaults, per DESIGN.md's contract.

Every mistake a user can write becomes an InputError naming the file and the
key, with what is allowed; the CLI turns it into exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic

from scalesim.errors import InputError
from scalesim.limits import SCENARIO_LIMITS, check_limits
from scalesim.scenario.frameworks import (blame_preset, blames_framework, fsdp_version_at,  # noqa: F401
                                         with_framework_defaults, without_framework_defaults, zero_stages)
from scalesim.scenario.graphs import graphs_cleared, graphs_refusal  # noqa: F401
from scalesim.scenario.tp_comm import TpCommOverlapSpec, tp_async_needs_sp, tp_comm_overlap_needs_sp
from scalesim.scenario.money import OwnershipSpec, PricingSpec, ReliabilitySpec, UncertaintySpec  # noqa: F401
from scalesim.scenario.training import LORA_TARGETS, LoraSpec, TrainingSpec, resolved_attention  # noqa: F401
from scalesim.schema import Strict, input_error, validate
from scalesim.topology.cluster import Fabric
from scalesim.topology.design import read_yaml


class FabricSpec(Strict):
    link: str
    nics_per_node: pydantic.PositiveInt = 8
    topology: Literal["fat-tree", "rail-optimized", "single-switch"] = "fat-tree"
    oversubscription: pydantic.PositiveFloat = 1.0

    def as_fabric(self) -> Fabric:
        """The topology layer's fabric: the one place a scenario's `fabric:` becomes a Fabric."""
        return Fabric(self.link, self.nics_per_node, self.topology, self.oversubscription,
                      nics_given="nics_per_node" in self.model_fields_set)


class ClusterSpec(Strict):
    node: str | dict[str, Any]
    nodes: pydantic.PositiveInt = 1
    gpus: pydantic.PositiveInt | None = None
    fabric: FabricSpec | None = None
    # One standard deviation of per-GPU speed over the median GPU's; a step runs at the
    # slowest GPU's pace (scalesim/costs/variability.py). 0: all GPUs equally fast.
    gpu_speed_spread: float = pydantic.Field(0.015, ge=0.0, le=0.5)

    @pydantic.model_validator(mode="after")
    def _fabric_for_many(self) -> "ClusterSpec":
        if self.nodes > 1 and self.fabric is None:
            raise ValueError("cluster.fabric is required when nodes > 1, e.g. fabric: {link: roce-100g, "
                             "nics_per_node: 1, topology: fat-tree} (`scalesim hardware` lists the links)")
        return self


class ParallelSpec(Strict):
    dp: pydantic.PositiveInt | None = None      # [gpus / (tp*pp*cp)]
    tp: pydantic.PositiveInt = 1
    pp: pydantic.PositiveInt = 1
    cp: pydantic.PositiveInt = 1
    # How CP exchanges K and V (parallel/cp_exchange.py): [p2p ring; all_gather for a model with a window];
    # torch_ring: PyTorch's ring as torchtitan runs it (parallel/torch_ring.py); a2a: TE's all-to-all (cp_a2a.py)
    cp_comm_type: Literal["p2p", "all_gather", "torch_ring", "a2a"] | None = None
    # Expert parallelism (MoE models): experts split over ep ranks cut from cp x dp, as Megatron-Core
    # does (scalesim/parallel/experts.py); must divide the experts and dp x cp.
    ep: pydantic.PositiveInt = 1
    # Expert tensor parallelism (Megatron-Core --expert-tensor-parallel-size): None = tp (experts split
    # like the MLP); 1 = experts whole, expert parallelism cut from tp x cp x dp (ep must divide it).
    etp: pydantic.PositiveInt | None = None
    # MoE dispatch/combine all-to-alls overlap other work (Megatron-Core --overlap-moe-expert-parallel-comm,
    # DeepSeek-V3's DualPipe) instead of blocking the layer.
    moe_overlap: bool = False
    # MoE token dispatcher (scalesim/parallel/experts.py): alltoall = Megatron-Core's NCCL all-to-all
    # dispatcher (top_k copies per token, a sort by local expert after dispatch and back before combine);
    # flex = DeepEP / HybridEP (--moe-token-dispatcher-type flex): each token once per destination rank.
    moe_dispatcher: Literal["alltoall", "flex"] = "alltoall"
    zero: Literal[0, 1, 2, 3] = 0
    offload_optimizer: bool = False     # ZeRO-Offload: optimizer state and update on the CPU
    # ZeRO-Infinity / FSDP CPU offload of the weights themselves: they live in host memory and
    # stream to the GPU layer by layer in every forward and backward (scalesim/parallel/offload.py).
    offload_params: bool = False
    pp_schedule: Literal["gpipe", "1f1b", "interleaved"] = "1f1b"
    virtual_stages: pydantic.PositiveInt = 1
    # Pipeline P2P beside compute (Megatron-Core's overlap_p2p_comm) or each batched exchange followed by a
    # device sync (Megatron-LM's batch_p2p_sync; the 2021 releases always). None: on for interleaved only.
    overlap_p2p_comm: bool | None = None
    pp_scatter_gather: bool = False     # Megatron-LM of 2021's P2P scatter-gather over TP (parallel/p2p_batched.py)
    # Megatron-Core's uneven pipeline split (scalesim/parallel/stages.py): a layout string
    # (--pipeline-model-parallel-layout, e.g. "Et*3|(tttt|)*14tt|L"), or the blocks of the first / last
    # stage (--decoder-first/last-pipeline-num-layers) with the rest shared evenly. None: an even split.
    pipeline_layout: str | None = pydantic.Field(None, max_length=10_000)
    decoder_first_pipeline_num_layers: pydantic.PositiveInt | None = None
    decoder_last_pipeline_num_layers: pydantic.PositiveInt | None = None
    sequence_parallel: bool = False
    # How sequence-parallel activations are laid out (scalesim/parallel/sp_layout.py): seq-first (s, b, h),
    # Megatron-LM's, gathered and scattered in place; batch-first (b, s, h) sharded on dim 1, torch
    # DTensor's (torchtitan): each all-gather / reduce-scatter also copies the whole tensor. No effect
    # without sequence parallelism.
    sequence_parallel_layout: Literal["seq-first", "batch-first"] = "seq-first"
    # Transformer Engine's userbuffers overlap of the sequence-parallel collectives with the GEMMs
    # (NeMo ub_tp_comm_overlap, MLPerf TP_COMM_OVERLAP; parallel/tp_overlap.py): true, or its chunk and SM counts.
    tp_comm_overlap: bool | TpCommOverlapSpec = False
    _tp_overlap_sp = pydantic.field_validator("tp_comm_overlap")(tp_comm_overlap_needs_sp)
    # nanotron's tp_linear_async_communication: each half's input all-gather beside the local shard's GEMM in
    # forward, the output gradient's beside the local shard's data gradient in backward (parallel/sp_backward.py)
    tp_linear_async_communication: bool = False
    # How a block half's backward under sequence parallelism is simulated: fused = one blocking all-reduce
    # (the faster approximation); split = the three collectives Megatron-LM, TE and nanotron issue, two of
    # them beside the data- and weight-gradient GEMMs (parallel/sp_backward.py): about twice the tasks,
    # the same validate median (3.78% against 3.80%, 5 Dec 2026). nanotron's async linears imply split.
    sequence_parallel_backward: Literal["fused", "split"] = "fused"
    # Multi-head latent attention's down-projections: duplicated = replicated on every TP rank (TELinear,
    # Megatron-Core since 13 Jun 2025, e63aee46b2); column-parallel = split over the TP ranks, which makes MLA
    # gather and scatter its latents (Megatron-Core 24 Feb - 13 Jun 2025, e.g. NeMo 25.04; parallel/mla_tp.py).
    mla_down_proj: Literal["duplicated", "column-parallel"] = "duplicated"
    _tp_async_sp = pydantic.field_validator("tp_linear_async_communication")(tp_async_needs_sp)
    bucket_mb: pydantic.PositiveFloat = 25.0
    # Megatron-Core's bucket_size (DistributedDataParallelConfig, in parameters): buckets of whole parameter
    # tensors, each closing once it holds at least this many (1: one bucket per tensor); replaces bucket_mb.
    bucket_params: pydantic.PositiveInt | None = None
    # Megatron-Core's check_for_nan_in_grad: before each bucket's reduction its gradient norm is computed
    # and tested for NaN / Inf on the host (a device sync per bucket; parallel/megatron_dp.py).
    grad_nan_check: bool = False
    # Megatron-Core's overlap_param_gather_with_optimizer_step (with overlap_param_gather, ZeRO 1/2): every
    # parameter all-gather is dispatched right after the update and, under CUDA_DEVICE_MAX_CONNECTIONS=1,
    # the forward's kernels start after them (parallel/megatron_dp.py).
    param_gather_with_optimizer_step: bool = False
    # Megatron-Core's align_param_gather (with overlap_param_gather, ZeRO 1/2): the forward pre-hooks leave the
    # next bucket's all-gather to the interleaved schedule; without it each waits on its own (megatron_dp.py).
    align_param_gather: bool = False
    overlap_grad_reduce: bool = True
    # ZeRO-1/2: gather the updated parameters layer by layer during the next forward
    # (Megatron-LM --overlap-param-gather) rather than in one call after the optimizer step
    # (DeepSpeed's default, and scalesim's). No effect at zero 0 (nothing to gather) or 3
    # (which gathers before every use anyway), so sweeps over ZeRO stages may leave it set.
    overlap_param_gather: bool = False
    # fp8 training: the ZeRO / FSDP parameter all-gathers carry the transformer blocks' weights in fp8,
    # 1 byte each (Megatron-Core --fp8-param-gather, TE's Float8Tensor weights); embeddings stay 16-bit.
    fp8_param_gather: bool = False
    # Precision of the data-parallel gradient reduction. auto: fp32 for plain data parallelism in
    # 16-bit or fp8 (PyTorch DDP under autocast keeps fp32 weights and gradients), else the
    # training precision (Megatron-LM, DeepSpeed and FSDP keep 16-bit gradients); fp32 with fp32-add.
    grad_reduce_dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # DDP's gradient_as_bucket_view (or Megatron-LM's contiguous gradient buffer): gradients are
    # views into the reduction buckets, so DDP keeps no second copy (scalesim/costs/memory.py).
    gradient_as_bucket_view: bool = False
    # ZeRO-1 run inside PyTorch DDP (nanotron: its reduce-scatter is DDP's communication hook), so
    # DDP's 16-bit gradient buckets are held beside the fp32 accumulation buffer (scalesim/costs/memory.py).
    zero1_over_ddp: bool = False
    # How micro-batch gradients are summed. fused: inside the weight-gradient GEMM (Megatron-LM's
    # gradient_accumulation_fusion) or by autograd, no pass of its own; fp32-add: after every
    # micro-batch's backward each 16-bit gradient is added into an fp32 buffer, one memory-bound
    # pass over the stage's parameters (nanotron accumulate_grad_in_fp32); autograd-add: autograd adds each
    # later micro-batch's gradient into param.grad (Megatron-LM of 2021; scalesim/costs/accumulation.py).
    grad_accumulation: Literal["fused", "fp32-add", "autograd-add"] = "fused"
    # How transformer blocks are cut into pipeline stages. layers: as evenly as possible, the end stages
    # taking fewer (Megatron-LM, scalesim/parallel/stages.py); nanotron: nanotron's compute-cost placement,
    # which puts more blocks on the first stage (scalesim/parallel/cost_balance.py), and, with stages on
    # more than one server and TP > 1, its engine's time per layer (scalesim/costs/host.py).
    pipeline_balance: Literal["layers", "nanotron"] = "layers"
    # Sequence parallelism: true, column-parallel linears save their input's shard and all-gather it again
    # in backward; false, they save the gathered input (nanotron's tp_recompute_allgather; costs/nanotron_memory.py).
    tp_recompute_allgather: bool = True
    order: str = "tp-cp-dp-pp"          # rank placement, innermost first (Megatron's default)
    # NCCL's CTA limit per communicator (ncclConfig_t.maxCTAs; collectives/kernels.py): dp = the data-parallel
    # gradient and parameter collectives (dp or dp x cp groups), cp, tp, ep. {}: NCCL's default counts.
    nccl_max_ctas: dict[Literal["dp", "cp", "tp", "ep"], pydantic.PositiveInt] = {}
    # ZeRO-3 as PyTorch FSDP runs it (scalesim/parallel/fsdp.py): 1 = FullyShardedDataParallel (flat
    # parameters; gradient cast and pre-divide before each reduce-scatter), 2 = fully_shard (copy-out
    # after each all-gather, copy-in before each reduce-scatter); None = DeepSpeed ZeRO-3 (flat buffers,
    # no such kernels).
    fsdp_version: Literal[1, 2] | None = None
    # When ZeRO-3 gathers the next unit in backward: pre / post = FSDP1's BackwardPrefetch.BACKWARD_PRE /
    # BACKWARD_POST (the next all-gather queued ahead of this unit's reduce-scatter); none = when that
    # unit's backward starts, behind the reduce-scatter. None: pre, what each default does: FSDP1's
    # backward_prefetch default BACKWARD_PRE, FSDP2's one-unit backward prefetch in its pre-backward hook,
    # DeepSpeed ZeRO-3's prefetch from each submodule's pre-backward fetch (partitioned_param_coordinator.py
    # fetch_sub_module, stage3_prefetch_bucket_size 5e7 parameters ahead by default, @v0.14.0).
    fsdp_backward_prefetch: Literal["pre", "post", "none"] | None = None
    # FSDP keeps the last transformer block gathered from its forward to its backward (torchtitan's
    # reshard_after_forward policy without PP; the root always stays gathered): scalesim/parallel/fsdp.py
    fsdp_keep_last_block: bool = False
    # HSDP (FSDP1 HYBRID_SHARD, FSDP2's 2-D mesh): shard over this many consecutive dp ranks, replicate
    # across the rest (scalesim/parallel/fsdp.py); None: shard over all of dp
    hsdp_shard: pydantic.PositiveInt | None = None

    @pydantic.field_validator("fsdp_version", "fsdp_backward_prefetch", "hsdp_shard")
    @classmethod
    def _fsdp_needs_zero3(cls, value, info: pydantic.ValidationInfo):
        if value is not None and info.data.get("zero") != 3:
            raise ValueError(f"FSDP's full sharding is ZeRO-3: {info.field_name} needs zero: 3 (got zero: "
                             f"{info.data.get('zero')}); allowed without it: null")
        return value

    @pydantic.field_validator("fsdp_keep_last_block")
    @classmethod
    def _keep_needs_fsdp(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        if value and info.data.get("fsdp_version") is None:
            raise ValueError("fsdp_keep_last_block is PyTorch FSDP's reshard_after_forward: true needs fsdp_version "
                             "1 or 2 (and zero: 3); allowed without it: false")
        return value

    @pydantic.field_validator("zero1_over_ddp")
    @classmethod
    def _zero1_over_ddp_needs_zero1(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        if value and info.data.get("zero") != 1:
            raise ValueError("zero1_over_ddp describes ZeRO-1 run inside DDP: it needs zero: 1 "
                             f"(got zero: {info.data.get('zero')})")
        return value

    @pydantic.field_validator("order")
    @classmethod
    def _order_is_a_permutation(cls, value: str) -> str:
        parts = value.split("-")
        if sorted(parts) != ["cp", "dp", "pp", "tp"]:
            raise ValueError(f"order must list tp, cp, dp and pp once each, innermost first, "
                             f"e.g. tp-cp-dp-pp or tp-pp-dp-cp (got {value!r})")
        return value


class Scenario(Strict):
    name: str
    description: str = ""
    cluster: ClusterSpec
    model: str | dict[str, Any]
    training: TrainingSpec
    parallel: ParallelSpec = ParallelSpec()
    pricing: PricingSpec = PricingSpec()
    reliability: ReliabilitySpec = ReliabilitySpec()
    uncertainty: UncertaintySpec = UncertaintySpec()
    source: list[str] = []
    # compare this design at its best fitting plan (the `sweep --search` search), as `compare --search`
    search: bool = False

    _framework_set: tuple = pydantic.PrivateAttr(default=())     # (key, value) its framework's preset set

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _framework_defaults(cls, data: Any, handler) -> "Scenario":
        """training.framework's defaults for the keys the scenario does not write (scenario/frameworks.py)."""
        if isinstance(data, Scenario):      # an instance keeps the keys its framework set (model_validate(s) is s)
            return handler(data)
        data, applied = with_framework_defaults(data, _default_of, _as_read)
        try:
            scenario = handler(data)
        except (pydantic.ValidationError, InputError) as exc:     # one naming a key the preset set says so
            if not applied:
                raise
            error = exc if isinstance(exc, InputError) else input_error(cls, exc)
            blamed = blame_preset(error, data["training"]["framework"], applied)
            if blamed is error:
                raise
            raise blamed from None
        scenario._framework_set = applied
        return scenario

    @pydantic.model_validator(mode="after")
    def _within_limits(self) -> "Scenario":
        check_limits(self, SCENARIO_LIMITS)     # values far beyond real systems (scalesim/limits.py)
        refusal = self.training.cuda_graphs and graphs_refusal(self.parallel.zero, self.parallel.fsdp_version)
        if refusal:     # graphs that cannot capture the plan's layers (scenario/graphs.py)
            raise blame_preset(InputError(refusal, key="training.cuda_graphs"), self.training.framework,
                               self._framework_set)
        return self

    def with_changes(self, **sections: dict[str, Any]) -> "Scenario":
        """A copy with some keys of some sections replaced (for scaling and sweeps).

        `model` is replaced whole: a zoo name or another inline definition never
        inherits keys of the model it replaces.
        """
        data = self.model_dump(exclude_unset=True)     # defaults stay defaults (e.g. a fabric NIC count the user never chose)
        data = without_framework_defaults(data, self._framework_set)     # and its framework's are taken anew
        for section, changes in sections.items():
            if section != "model" and isinstance(data.get(section), dict) and isinstance(changes, dict):
                data[section] = {**data[section], **changes}
            else:
                data[section] = changes
        return validate(Scenario, data)


def _default_of(key: str) -> Any:
    """A `training.` or `parallel.` key's own default."""
    section, field = key.split(".")
    return {"training": TrainingSpec, "parallel": ParallelSpec}[section].model_fields[field].default


def _as_read(key: str, value: Any) -> Any:
    """A written `training.` or `parallel.` value as its field reads it (lax: "2" -> 2); as written if invalid."""
    section, field = key.split(".")
    info = {"training": TrainingSpec, "parallel": ParallelSpec}[section].model_fields[field]
    try:
        return pydantic.TypeAdapter(info.rebuild_annotation()).validate_python(value)
    except pydantic.ValidationError:
        return value


def load_scenario(path: str | Path) -> tuple[Scenario, str]:
    """Read and validate a scenario file; returns the scenario and its path as text."""
    if not isinstance(path, (str, Path)):
        raise InputError(f"expected a scenario file path, got {type(path).__name__}")
    file = str(path)
    data = read_yaml(Path(path), what="scenario file")
    if data is None:
        raise InputError("the file is empty; a scenario needs name, cluster, model and training",
                         file=file)
    if isinstance(data, dict) and "serving" in data and "training" not in data:
        raise InputError("this is a serving scenario; simulate it with `scalesim serve`", file=file, key="training")
    return validate(Scenario, data, file=file), file
