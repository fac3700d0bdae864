"""A parallel plan: how one optimizer step is split over the GPUs and which techniques it uses."""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.costs.coalesced import param_tensor_shares, param_tensor_weights
from scalesim.costs.finetune import FinetuneSpec
from scalesim.parallel.placement import Placement
from scalesim.parallel.tp_overlap import TpOverlapSpec


@dataclass(frozen=True, slots=True)
class ParallelPlan:
    placement: Placement
    micro_batch: int
    micro_batches: int              # micro-batches per optimizer step per data-parallel replica
    precision: str
    optimizer: str
    checkpointing: str
    attention: str
    zero: int = 0
    sequence_parallel: bool = False
    # Activations (b, s, h) sharded on dim 1 (torch DTensor plans, torchtitan): each sequence-parallel
    # call carries a copy of the gathered tensor (parallel/sp_layout.py); seq-first: Megatron's (s, b, h).
    sequence_parallel_layout: str = "seq-first"
    schedule: str = "1f1b"
    overlap_p2p_comm: bool | None = None    # None: as Megatron-Core runs the schedule (p2p_overlapped)
    # Megatron-LM of 2021's scatter-gather: each TP rank sends 1/t of a P2P tensor, the receivers
    # all-gather it (parallel/p2p_batched.py)
    pp_scatter_gather: bool = False
    virtual_stages: int = 1
    bucket_bytes: float = 25 * 2**20
    # Megatron-Core buckets of whole tensors of at least this many parameters (parallel/megatron_dp.py);
    # None: torch DDP's byte-capped buckets (parallel/ddp.py)
    bucket_params: int | None = None
    grad_nan_check: bool = False    # each bucket's gradient norm checked on the host first (parallel/megatron_dp.py)
    # overlap_param_gather: every all-gather dispatched with the optimizer step, the forward after them (megatron_dp.py)
    param_gather_with_optimizer_step: bool = False
    align_param_gather: bool = False    # next bucket's all-gather left to the interleaved schedule (megatron_dp.py)
    overlap_grad_reduce: bool = True
    # ZeRO-1/2: all-gather the updated parameters layer by layer ahead of the next forward
    # (Megatron-LM --overlap-param-gather) instead of in one call after the optimizer step.
    overlap_param_gather: bool = False
    fp8_param_gather: bool = False  # parameter all-gathers carry block weights in fp8 (parallel/builder.py)
    fp8_delayed_scaling: bool = False   # fp8 under TE's delayed scaling: amax all-reduces (parallel/fp8_amax.py)
    offload_optimizer: bool = False
    offload_params: bool = False    # weights in host memory, copied in before every use (parallel/offload.py)
    finetune: FinetuneSpec | None = None   # LoRA / QLoRA: frozen base, trained adapters (costs/finetune.py)
    memory_format: str = "nhwc"     # conv activation layout (scalesim/costs/compute.py)
    grad_reduce_dtype: str | None = None   # data-parallel gradient reduction; None: the gradients' own
    fp32_weights: bool = False      # PyTorch autocast style: fp32 weights and gradients (costs/memory.py)
    slowest_gpu_factor: float = 1.0  # GPU work takes this much longer: the job's slowest GPU sets the pace
    # CPU time to issue one eager op (costs/host.py); 0 leaves the host out of the simulation.
    host_dispatch_s: float = 0.0
    cuda_graphs: bool = False       # each layer's kernels launched as one CUDA graph (costs/host.py)
    # The gradient norm read on the host before the update (Megatron-Core's clip): the update's host time
    # after it is exposed (parallel/optimizer_tail.py, costs/optimizer_tail.py).
    grad_clip_host_sync: bool = False
    # The host waits for the GPU once per decoder layer forward (Megatron-DeepSpeed's torch.tensor(0.0, device=...):
    # parallel/layer_sync.py)
    layer_forward_host_sync: bool = False
    # The host waits for the GPU after each micro-batch's backward (HF Trainer's NaN/inf loss check:
    # parallel/step_syncs.py)
    loss_check_host_sync: bool = False
    # Mixture of experts: the busiest expert's tokens over the mean (parallel/experts.py), and whether
    # the dispatch / combine all-to-alls overlap other work instead of blocking the layer.
    moe_imbalance: float = 1.0
    moe_overlap: bool = False
    moe_dispatcher: str = "alltoall"    # token dispatcher: alltoall | flex (parallel/experts.py)
    # DDP's gradient_as_bucket_view: gradients live in the reduction buckets, not beside them (costs/memory.py)
    gradient_as_bucket_view: bool = False
    # ZeRO-1 inside torch DDP (nanotron): its 16-bit buckets stay (costs/memory.py); its per-rank-slice
    # collectives cost host time and hold the backward (parallel/nanotron_dp.py)
    zero1_over_ddp: bool = False
    grad_accumulation: str = "fused"  # fp32-add: a pass per micro-batch (costs/accumulation.py)
    cross_entropy: str = "fused"    # how the loss holds its logits (costs/memory.py)
    pipeline_balance: str = "layers"  # nanotron: its compute-cost stage placement (parallel/cost_balance.py)
    # Host seconds per decoder layer and micro-batch (forward + backward) the pipeline engine adds
    # (nanotron's across servers: costs/host.py nanotron_pipeline_layer_s)
    pipeline_layer_host_s: float = 0.0
    # Full checkpointing of only the first N transformer blocks of each chunk (costs/recompute.py,
    # recomputed_blocks); None: of every layer.
    recompute_layers: int | None = None
    # Selective recomputation by module (Megatron-Core --recompute-modules, costs/recompute.py
    # RECOMPUTE_MODULES); empty: the attention core.
    recompute_modules: tuple[str, ...] = ()
    # Transformer blocks per pipeline chunk in model order (a Megatron-Core pipeline layout,
    # parallel/stages.py pipeline_blocks); None: the even split of stages.split_blocks.
    pipeline_blocks: tuple[int, ...] | None = None
    # ZeRO-3 as PyTorch FSDP runs it: 1 (FlatParameter) or 2 (fully_shard), with their own copy and
    # cast kernels around the collectives (parallel/fsdp.py); None: no such kernels (DeepSpeed ZeRO-3).
    fsdp_version: int | None = None
    fsdp_backward_prefetch: str = "pre"   # pre | post | none: ZeRO-3's backward all-gather order (rank_program.py)
    fsdp_keep_last_block: bool = False    # FSDP keeps the last block gathered from forward to backward (fsdp.py)
    hsdp_shard: int | None = None         # HSDP: units sharded over this many dp ranks, replicated across (fsdp.py)
    # NCCL CTA limits per communicator, ((name, max_ctas), ...): dp (gradient and parameter
    # collectives over dp or dp x cp), cp, tp, ep (collectives/kernels.py cta_limited)
    nccl_max_ctas: tuple[tuple[str, int], ...] = ()
    # Transformer Engine's userbuffers TP overlap (parallel/tp_overlap.py); None: blocking TP collectives.
    tp_overlap: TpOverlapSpec | None = None
    # Full-sequence all-gather buffers each TP rank keeps for the run (nanotron's MemoryBuffer:
    # costs/nanotron_memory.py); 0: none beyond the saved activations.
    tp_gather_buffers: int = 0
    # Context parallelism runs PyTorch's ring as torchtitan does (parallel/torch_ring.py), not Transformer Engine's.
    cp_torch_ring: bool = False
    # Column-parallel linears keep their all-gathered input for backward (costs/nanotron_memory.py).
    tp_saves_gathered_inputs: bool = False
    # nanotron's async TP linears: sequence-parallel gathers beside the local shard's GEMM (parallel/sp_backward.py)
    tp_async: bool = False
    # split: sequence parallelism's backward as its three collectives (parallel/sp_backward.py); fused: one
    # blocking all-reduce per block half
    sp_backward: str = "fused"
    mla_down_proj: str = "duplicated"    # column-parallel: MLA's latent exchanges (parallel/mla_tp.py)

    def gathered_bytes_per_param(self, layer, weight_bytes: float) -> float:
        """Bytes a parameter of the layer takes in the parameter all-gathers, on average over its tensors
        (`gathered_tensor_bytes`)."""
        if not (self.fp8_param_gather and layer.kind == "transformer_block"):
            return weight_bytes
        return sum(share * per_param for share, per_param in zip(param_tensor_shares(layer),
                                                                 self.gathered_tensor_bytes(layer, weight_bytes)))

    def gathered_tensor_bytes(self, layer, weight_bytes: float) -> tuple[float, ...]:
        """Bytes a parameter of each of the layer's tensors (costs/coalesced.py param_tensor_shares) takes in
        the parameter all-gathers, each in its own dtype: fp8_param_gather gathers Transformer Engine's FP8
        block weights (its GEMMs'), a byte each, their norm weights and biases as stored; the rest as stored
        (Megatron-Core: a uint8 buffer for FP8 parameters, the others' in their dtype, parallel/megatron_dp.py)."""
        fp8 = self.fp8_param_gather and layer.kind == "transformer_block"
        return tuple(1.0 if fp8 and weight else weight_bytes for weight in param_tensor_weights(layer))

    def max_ctas(self, span: tuple[str, ...], comm: str | None = None) -> int | None:
        """The CTA limit of communicator `comm` (ep: the expert all-to-alls, whose span holds dp), else
        of the one spanning these placement dimensions, if set."""
        name = comm or ("dp" if "dp" in span else span[0] if span else None)
        return dict(self.nccl_max_ctas).get(name)

    @property
    def layer_synced(self) -> bool:
        """Whether each layer forward holds Megatron-DeepSpeed's host sync (parallel/layer_sync.py): the key, a host
        model, no CUDA graphs (capture refuses a sync)."""
        return self.layer_forward_host_sync and self.host_dispatch_s > 0 and not self.cuda_graphs

    @property
    def p2p_overlapped(self) -> bool:
        """Whether pipeline P2P runs beside compute, without the device sync after each batched exchange
        Megatron-LM otherwise makes (builder.py _p2p): Megatron-Core's interleaved schedule sets
        overlap_p2p_comm; 1F1B and older releases (the 2021 Megatron-LM of SC21) do not."""
        return self.schedule == "interleaved" if self.overlap_p2p_comm is None else self.overlap_p2p_comm

    @property
    def chunks_per_stage(self) -> int:
        return self.virtual_stages if self.schedule == "interleaved" else 1

    @property
    def chunks(self) -> int:
        return self.placement.pp * self.chunks_per_stage
