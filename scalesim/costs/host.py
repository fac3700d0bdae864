"""The host side of a training step: the CPU time that issues each task's kernels.

Eager PyTorch launches every kernel from a host thread: Python, the
dispatcher, autograd bookkeeping and `cudaLaunchKernel` run on the CPU before
the kernel can start. The GPU runs ahead of nothing: when kernels are shorter
than their dispatch (small models, small micro-batches, tensor-parallel
slices) it waits for the host. Pure functions: the builder attaches each
task's host time, the engine plays the host thread out.
"""

from __future__ import annotations

from scalesim.costs.recompute import module_ops
from scalesim.costs.te_unfused import extra_kernels as te_unfused_kernels
from scalesim.models.spec import LayerSpec

# CPU time to issue one eager PyTorch op from Python, seconds. NVIDIA's
# dgxc-benchmarking "Pytorch kernel launch latency" microbenchmark times a
# tiny GEMM called from Python in a loop, i.e. the full dispatch path with a
# kernel that takes no time: its published sample output gives 11.3-17.7 us
# per call over 8 sizes, median 13.0 us (NVIDIA/dgxc-benchmarking,
# microbenchmarks/cpu_overhead/README.md @ c3594cbd; run on the recipe's
# GB200/B200/H100 hosts). A node design may give its own figure
# (`host.dispatch_us_per_op`) for a faster or slower CPU.
DISPATCH_S_PER_OP = 13.0e-6

# Backward kernels are issued by autograd's C++ engine, not by Python: each
# still goes through the dispatcher and the CUDA launch, but skips the
# interpreter and the pybind11 boundary (~2 of the ~5-25 us, jiahuanglin.xyz
# "From PyTorch op to kernel launch"; PyTorch autograd engine design notes).
# ESTIMATE: a backward launch costs this fraction of a forward op.
BACKWARD_DISPATCH_FRACTION = 0.6

# CUDA graphs (Megatron-LM/Transformer Engine `make_graphed_callables`, one
# graph per layer and micro-batch) replace a layer's launches with one graph
# launch: measured ~15 us fixed plus ~0.58 us per kernel node on an RTX 5070
# Ti with CUDA 13 (ahrefs/ocannl issue #488, "Measured: what graph replay is
# actually worth", chains of 8-117 kernels).
GRAPH_LAUNCH_S = 15.0e-6
GRAPH_NODE_S = 0.58e-6

# Kernels an op launches, (forward, backward). GEMMs: one forward, data- and
# weight-gradient GEMMs backward. Norms: one fused kernel forward, input and
# parameter gradients backward (apex/TE fused LayerNorm). Flash attention: one
# kernel forward, its backward's pre-processing and main kernels. Attention
# with materialised scores runs its pieces as separate kernels: naive
# (eager: QK^T, scale, mask, softmax, dropout, AV), fused (Megatron: QK^T,
# fused scale-mask-softmax, dropout, AV); their backwards one kernel each
# again plus the second GEMM of each matmul.
KERNELS = {
    "gemm": (1, 2), "conv": (1, 2), "elementwise": (1, 1), "norm": (1, 2), "softmax": (1, 1),
    "embedding": (1, 1), "pool": (1, 1),
}
ATTENTION_KERNELS = {"naive": (6, 8), "fused": (4, 6)}      # te-unfused: fused's and its own (costs/te_unfused.py)
FLASH_ATTENTION_KERNELS = (1, 2)


def layer_kernels(layer: LayerSpec, attention: str) -> tuple[int, int, int]:
    """Kernels one micro-batch of the layer launches: (forward, backward, attention forward).

    The last is what selective recomputation re-runs."""
    forward = backward = attention_forward = 0
    for op in layer.ops:
        if op.kind == "attention":
            if attention == "te-unfused":           # fused's and its own (mask only if causal)
                f, b = ATTENTION_KERNELS["fused"]
                f, b = f + te_unfused_kernels(op, False), b + te_unfused_kernels(op, True)
            else:
                f, b = ATTENTION_KERNELS.get(attention, FLASH_ATTENTION_KERNELS)
            attention_forward += f
        elif op.backward_only:
            f, b = 0, 1
        else:
            f, b = KERNELS.get(op.kind, (1, 1))
        forward += f
        backward += b
    return forward, backward, attention_forward


def module_kernels(layer: LayerSpec, modules: tuple[str, ...], attention_forward: int) -> int:
    """Kernels selective recomputation launches: the attention core's (`attention_forward`, from
    `layer_kernels`) without `modules`, else one forward per op of the listed modules (their
    grouped GEMMs' per-expert launches come with `expert_host_s`)."""
    if not modules:
        return attention_forward
    names = module_ops(modules)
    return sum(KERNELS.get(op.kind, (1, 1))[0] if op.kind != "attention" else FLASH_ATTENTION_KERNELS[0]
               for op in layer.ops if op.name in names)


def launch_host_s(kernels: int, dispatch_s: float, cuda_graphs: bool, backward: bool = False) -> float:
    """Host time to issue `kernels` kernels of one pass of one layer.

    >>> launch_host_s(10, 13e-6, False) == 10 * 13e-6
    True
    >>> launch_host_s(10, 13e-6, True) < launch_host_s(10, 13e-6, False)
    True
    """
    if kernels <= 0:
        return 0.0
    if cuda_graphs:
        return GRAPH_LAUNCH_S * (dispatch_s / DISPATCH_S_PER_OP) + kernels * GRAPH_NODE_S
    return kernels * dispatch_s * (BACKWARD_DISPATCH_FRACTION if backward else 1.0)


# Mixture-of-experts blocks (Megatron-Core with Transformer Engine, as the MoE
# recipes of validation/cases/moe.yaml run them) cost the host two things a dense
# block does not:
#
# 1. A device-to-host sync per MoE layer and forward pass. The dropless token
#    dispatchers need the tokens each expert gets as Python integers (all-to-all
#    split sizes, the grouped GEMM's m_splits): MoEAlltoAllTokenDispatcher copies
#    them to the host and waits on that copy "before_ep_alltoall" (or
#    "before_finish" without expert parallelism) in every forward
#    (NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py,
#    `_maybe_dtoh_and_synchronize`, `cuda_sync_point`); the flex dispatcher's
#    HybridEP backend drains the compute stream to learn the permuted row count
#    (NVIDIA-NeMo/Automodel pull request #3931, "sync-free HybridEP dispatch");
#    AMD's Primus lists syncs in router, dispatcher, permutation and grouped MLP
#    (AMD-AGI/Primus issue #203). Backward reuses the counts: no sync. Only the
#    drop-and-pad path (`moe_pad_expert_input_to_capacity`, every expert padded to
#    its capacity) knows the shapes in advance; scalesim takes a model with a
#    `capacity_factor` to run it. Megatron's per-layer CUDA graphs capture only the
#    router and the dispatch preprocessing of dropless MoE, so the sync stays with
#    `cuda_graphs` (Megatron Bridge docs/training/moe-optimization.md, "CUDA Graphs
#    for MoE": full graphs are for drop-and-pad MoE only).
# 2. Host work per local expert: Transformer Engine's grouped linear layers
#    (GroupedLinear, Megatron's TEGroupedMLP) split, quantize and launch one GEMM per
#    expert (a C++ loop of cuBLAS calls over 4 streams: TransformerEngine
#    transformer_engine/common/gemm/cublaslt_gemm.cu, nvte_multi_stream_cublas_gemm;
#    the torch.split and 2 x num_gemms torch.empty calls around it: TransformerEngine
#    issue #1499). Measured: TE's grouped MLP block (MXFP8, fused SwiGLU) takes ~1.2 ms
#    forward and ~2.1 ms backward of host time with 64 experts on GB200, where its kernels
#    are negligible (TransformerEngine issue #2897, "Reduce CPU overhead in grouped MLP
#    block", hidden size 128): EXPERT_MLP_HOST_S per local expert, scaled with the
#    host's dispatch speed. The MLP's own ops keep their per-op launches (`KERNELS`),
#    a small double count (~4 ops) beside the per-expert part.


def dispatcher_host_sync(capacity_factor: float | None) -> bool:
    """Whether an MoE layer's forward makes the host wait for the GPU (the token counts).

    >>> dispatcher_host_sync(None), dispatcher_host_sync(1.25)
    (True, False)
    """
    return capacity_factor is None


def expert_gemm_launches(layer: LayerSpec) -> tuple[int, int]:
    """Extra GEMM launches, (forward, backward), of one micro-batch of the layer's grouped
    expert GEMMs: one per local expert beyond the one `layer_kernels` counts per op.

    >>> from scalesim.models.spec import OpSpec
    >>> grouped = OpSpec("expert_down", "gemm", 1.0, 1.0, (256, 2048, 768), groups=16)
    >>> expert_gemm_launches(LayerSpec("b", "transformer_block", 0, (grouped,), 0.0))
    (15, 30)
    """
    forward = backward = 0
    for op in layer.ops:
        if op.kind == "gemm" and op.groups > 1:
            f, b = KERNELS["gemm"]
            forward += f * (op.groups - 1)
            backward += b * (op.groups - 1)
    return forward, backward


EXPERT_MLP_HOST_S = (1.2e-3 / 64, 2.1e-3 / 64)      # (forward, backward) per local expert, seconds

# 3. The eager path of Megatron-Core's NCCL all-to-all dispatcher around the experts (the
#    `alltoall` dispatcher: permutation, the token-count all-gather and its sync, the split-size
#    bookkeeping, the all-to-alls' Python wrappers, the sort by local expert and back, the
#    unpermutation and the probabilities' multiply, each many small torch ops). Measured: an nsys
#    NVTX summary of Qwen3-30B-A3B on 8 B200 (EP8, 16 local experts, MBS 1, seq 4096, BF16,
#    `alltoall` dispatcher, forced balance, no CUDA graphs; yanring/Megatron-MoE-ModelZoo issue #7,
#    Aug 2025) gives, per MoE layer forward, a median of 7.216 ms for the whole MoE MLP (`#MLP`
#    range, 6,137 instances), 1.871 ms of it in the router and dispatch preprocessing
#    (`#MOE_ROUTER_AND_PRE`), 2.625 ms in the dispatch (`#MOE_DISPATCH`) and 2.187 ms in the experts
#    (`#MOE_EXPERTS_COMP`): host time, as the GPU work of that layer is a fraction of a millisecond
#    on a B200. The router and preprocessing are left out (the recipes capture them in CUDA graphs:
#    `moe_router`, `moe_preprocess` scopes; scalesim keeps the router's per-op launches), and so are
#    the 16 experts' own host work already counted by EXPERT_MLP_HOST_S: what stays is the
#    dispatcher's fixed path, ALLTOALL_PATH_HOST_S per MoE layer forward, scaled with the host's
#    dispatch speed. Backward replays it through autograd at BACKWARD_DISPATCH_FRACTION of the
#    forward (the estimate for every backward launch above). The flex dispatcher (DeepEP, HybridEP:
#    one fused kernel each way) has no such path in this model; no measurement of its host time.
ALLTOALL_PATH_HOST_S = (7.216e-3 - 1.871e-3) - 16 * EXPERT_MLP_HOST_S[0]


def expert_host_s(layer: LayerSpec, dispatch_s: float, graphed: bool,
                  dispatcher: str | None = None) -> tuple[float, float]:
    """Host time, (forward, backward), of one micro-batch of the layer's grouped expert MLP
    beyond its per-op launches: EXPERT_MLP_HOST_S per local expert on a host issuing an op in
    `dispatch_s`, plus, with the `alltoall` dispatcher, its eager path (ALLTOALL_PATH_HOST_S);
    captured in a CUDA graph (drop-and-pad), only the per-expert GEMM nodes.

    >>> from scalesim.models.spec import OpSpec
    >>> up = lambda g: LayerSpec("b", "transformer_block", 0, (OpSpec("expert_up", "gemm", 1.0, 1.0, groups=g),), 0.0)
    >>> expert_host_s(up(1), 13e-6, False), expert_host_s(up(16), 13e-6, False) < expert_host_s(up(64), 13e-6, False)
    ((0.0, 0.0), True)
    >>> expert_host_s(up(16), 13e-6, False, "flex") < expert_host_s(up(16), 13e-6, False, "alltoall")
    True
    """
    groups = max((op.groups for op in layer.ops if op.kind == "gemm"), default=1)
    has_experts = any(op.name == "expert_up" for op in layer.ops)
    if groups <= 1 and not has_experts:
        return 0.0, 0.0
    if graphed:
        forward, backward = expert_gemm_launches(layer)
        return forward * GRAPH_NODE_S, backward * GRAPH_NODE_S
    scale = dispatch_s / DISPATCH_S_PER_OP
    forward, backward = (groups * per * scale if groups > 1 else 0.0 for per in EXPERT_MLP_HOST_S)
    if dispatcher == "alltoall" and has_experts:
        forward += ALLTOALL_PATH_HOST_S * scale
        backward += ALLTOALL_PATH_HOST_S * BACKWARD_DISPATCH_FRACTION * scale
    return forward, backward


# Ops of an MoE block that dropless MoE runs outside Megatron's per-layer CUDA graphs: the
# graphs capture attention, the router and the dispatch preprocessing ("attn", "moe_router",
# "moe_preprocess" scopes); the experts and everything after the dispatch have shapes known
# only at run time (Megatron Bridge docs/training/moe-optimization.md, "CUDA Graphs for MoE";
# docs/training/cuda-graphs.md, the transformer_engine scopes).
DYNAMIC_MOE_OPS = ("expert_gate", "expert_up", "expert_swiglu", "expert_down", "expert_bias", "moe_unpermute")


def outside_cuda_graphs(layer: LayerSpec, capacity_factor: float | None) -> bool:
    """Whether this part of a layer runs eagerly even with `cuda_graphs` (dropless MoE experts)."""
    return dispatcher_host_sync(capacity_factor) and any(op.name in DYNAMIC_MOE_OPS for op in layer.ops)


# nanotron's pipeline engine with its stages on more than one server (huggingface/nanotron branch
# nouamane/bench2 @67c5ebb6, the ultrascale playbook's benchmark sweep): every decoder layer then
# takes a time per micro-batch (forward + backward) set by the tensor-parallel size alone, not by the
# model's width or the micro-batch size. MEASURED in the sweep's own rows (nanotron bench_final2 CSV,
# copy in eyao600/Rapid-LLM validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6):
# the pipeline's time per micro-batch, step / (micro-batches + pp - 1), over the decoder layers of its
# fullest stage (nanotron's placement, parallel/cost_balance.py) is at TP 8 20-26 ms per layer for
# 1.34B (hidden 2048), 3.57B (3072), 8.86B (4096) and 80B (8192) alike, with micro-batches of 1 to 16
# sequences, where a 1.34B layer's GEMMs take under 1 ms at TP 8; the same splits inside one server,
# or without pipeline parallelism, run at their compute (1.34B tp2-pp2, micro-batch 1: 43.5 ms per
# micro-batch with dp 2 on one server, 84-86 ms with dp 4 or 8 on two or four). FITTED on the 1.34B,
# 3.57B and 8.86B multi-server runs with micro-batch 1 and at least 2 layers on the fullest stage
# (after the sweep's PP fix; runs over twice their group's median dropped as broken): median 8.7 ms
# per layer at TP 2 (34 runs), 13.0 at TP 4 (30), 21.1 at TP 8 (25), 46.7 at TP 16 (20, tensor
# parallelism across servers); least squares over TP 2-8 gives the two figures below (37.6 ms at TP
# 16: it under-counts TP across servers). The 80B runs are out of the fit and agree: 20.2-26.2 ms at
# TP 8 (24 runs), 44-49 at TP 16 (9); TP 1 runs show no floor (their time grows with the micro-batch),
# nor do the two runs with a single layer on the fullest stage (3.57B and 8.86B dp1-tp4-pp32: 6 and 10
# ms per micro-batch). Which part of the engine costs it is not established; it is issued as host
# time, a floor the GPU work runs under (the sweep's 80B layers at TP 8 take no longer than the 1.34B
# ones). Being the measured time per layer, it holds every host call of the layer: costs/nanotron_host.py
# keeps this floor where it applies and adds its own count of a nanotron layer only elsewhere.
NANOTRON_PP_LAYER_S = 4.63e-3            # seconds per decoder layer and micro-batch
NANOTRON_PP_LAYER_S_PER_TP = 2.06e-3     # and per tensor-parallel rank


def nanotron_pipeline_layer_s(tp: int, pp: int, servers: int) -> float:
    """Seconds per decoder layer and micro-batch (forward + backward) that nanotron's pipeline engine
    costs when its `pp` stages, `tp` GPUs wide, span `servers` > 1 servers (above); 0 otherwise.

    >>> round(nanotron_pipeline_layer_s(8, 4, 4) * 1e3, 2)
    21.11
    >>> nanotron_pipeline_layer_s(8, 4, 1), nanotron_pipeline_layer_s(1, 4, 4), nanotron_pipeline_layer_s(8, 1, 4)
    (0.0, 0.0, 0.0)
    """
    if pp <= 1 or tp <= 1 or servers <= 1:
        return 0.0
    return NANOTRON_PP_LAYER_S + NANOTRON_PP_LAYER_S_PER_TP * tp


def with_layer_host_s(parts: tuple[dict[str, float], ...], layer_s: float) -> tuple[dict[str, float], ...]:
    """The host times of a layer's parts with `layer_s` more per micro-batch: a third in the forward,
    two in the backward (it issues about twice the forward's kernels), shared evenly by the parts."""
    if layer_s <= 0 or not parts:
        return parts
    share = layer_s / len(parts)
    return tuple({**p, "forward": p["forward"] + share / 3, "backward": p["backward"] + 2 * share / 3}
                 for p in parts)
