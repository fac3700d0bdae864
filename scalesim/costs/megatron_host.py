"""Host work of one legacy Megatron GPT layer and micro-batch, counted from Megatron-DeepSpeed's code.

scalesim's generic host model (costs/host.py) charges a layer one dispatch per kernel its ops launch
(`layer_kernels`: 13 forward and 21 backward for a GPT block with Megatron's fused softmax). Megatron's
legacy layer (`megatron/model/transformer.py` ParallelTransformerLayer, as Megatron-DeepSpeed runs it:
microsoft/Megatron-DeepSpeed @0d6e3793, Sep 2024) issues more from Python: a custom autograd Function for
every linear (LinearWithGradAccumulationAndAsyncCommunication), the TP regions' Functions
(copy_to / reduce_from / reduce-scatter), apex's FusedLayerNormAffineFunction, the fused softmax's and
bias-GeLU's Functions, the RNG tracker's state swaps around the attention dropout, torch.distributed
calls, and the views around them; backward adds the kernels autograd's engine issues (the baddbmm's
alpha scaling, the split's cat, bias gradient sums, gradient accumulation). `layer_calls` counts them
site by site (validation/megatron-host-notes.md has the table with file:line); `layer_host_s` prices
them with costs/nanotron_host.py's per-call prices (`PRICE`). Pure functions.

It prices the legacy layer without CUDA graphs: scenarios whose attention is Megatron's fused
scale-mask-softmax (`attention: fused`, CoreAttention), and every `training.framework: megatron-deepspeed`
scenario, whose flash attention (`--use-flash-attn-v1/v2`: FlashSelfAttention; `--use-flash-attn-triton`:
FlashSelfAttentionTriton) runs in the same layer with another core attention (`CORE_ATTENTION`).
Megatron-Core's Transformer Engine layers are other code, not counted here.
"""

from __future__ import annotations

from scalesim.costs.host import DISPATCH_S_PER_OP, launch_host_s, layer_kernels
from scalesim.costs.nanotron_host import nanotron_layer_host_s, priced_s
from scalesim.models import ModelSpec


# The core attention's calls per micro-batch by the legacy layer's attention path, (forward, backward), with
# its nn.Module calls; the rest of the layer is the same code (sites: validation/megatron-host-notes.md).
CORE_ATTENTION = {
    # CoreAttention: baddbmm, fused softmax (its Function), dropout, bmm, permute copy; 15 views and buffer
    # gets, 3 module calls (core attention, softmax, dropout); backward: the softmax's Function and kernel,
    # bmm's 2 and baddbmm's 4 engine kernels (2 GEMMs, 2 alpha scalings), the dropout's
    "fused": ({"aten": 5, "function": 1, "view": 15 + 3}, {"aten": 1, "engine": 7, "function": 1}),
    # FlashSelfAttention (tr.py:834-846, 402-460): 3 rearrange-contiguous copies, cu_seqlens' arange,
    # FlashAttnVarlenFunc (its forward kernel and 3 views), the output's rearrange copy; 3 permutes, 3 + 1
    # flattening reshapes, the output's permute and contiguous, 1 module call; backward: the Function, its
    # kernel call, 3 engine kernels and 6 views (nanotron_host's count of it), the output reshape's copy
    "flash": ({"aten": 6, "function": 1, "view": 12 + 1}, {"aten": 1, "engine": 4, "function": 1, "view": 6}),
    # FlashSelfAttentionTriton (tr.py:481-494): 3 rearrange-contiguous copies, FlashAttnFunc (3 allocations,
    # a Triton kernel), the output's rearrange copy; backward: 5 allocations, 2 Triton kernels, dq's copy
    "triton": ({"aten": 4, "triton": 1, "function": 1, "view": 8 + 1},
               {"aten": 1, "triton": 2, "function": 1, "view": 5}),
}
# scalesim's attention values the legacy layer runs, and the path each names (flash3: no such path)
LEGACY_ATTENTION = {"fused": "fused", "flash": "flash", "flash2": "flash", "triton": "triton"}


def layer_calls(tp: int, sequence_parallel: bool = False, attention: str = "fused") -> dict[str, dict[str, int]]:
    """Calls of each kind one GPT layer and micro-batch issues, {"forward": {kind: n}, "backward": ...}
    (kinds as costs/nanotron_host.py's; the sites: validation/megatron-host-notes.md), with the core
    attention `attention` (a key of CORE_ATTENTION).

    >>> layer_calls(2)["forward"]["collective"], layer_calls(2, True)["forward"]["collective"]
    (2, 4)
    >>> layer_calls(1)["forward"]["function"], layer_calls(8)["forward"]["function"]
    (12, 10)
    """
    sharded = tp > 1
    sp = sharded and sequence_parallel
    core_forward, core_backward = ({kind: core.get(kind, 0) for kind in ("aten", "function", "view", "engine", "triton")}
                                   for core in CORE_ATTENTION[attention])
    forward = {
        # 2 norms' kernels; qkv GEMM and bias add; the core attention's; the dense GEMM; 2 bias-dropout-add
        # TorchScript calls; fc1 GEMM, bias-GeLU, fc2 GEMM
        "aten": 2 + 2 + core_forward["aten"] + 1 + 2 + 1 + 1 + 1,
        # 2 FusedLayerNormAffineFunction, 4 linears, 2 reduce_from (or reduce-scatter) regions, the core
        # attention's (fused softmax or flash), GeLUFunction; at TP 1 the two column linears' copy_to regions
        # (the async all-reduce inside the linear replaces them at TP > 1)
        "function": 2 + 4 + 2 + core_forward["function"] + 1 + (0 if sharded else 2),
        # the rows' all-reduces (reduce-scatters with SP), the columns' all-gathers with SP
        "collective": (2 if sharded else 0) + (2 if sp else 0),
        # apex's 3 contiguous calls a norm; 4 weight transposes; the qkv layout's view, split, reshape and
        # 2 squeezes; the core attention's; the RNG tracker's get/set/set (not with SP: transformer.py:322-325,
        # :839-843); 2 bias expand_as; make_viewless_tensor; 9 further nn.Module calls; with SP the
        # columns' gather buffers (2) and the reduce-scatters' output allocation and contiguous (4)
        "view": 6 + 4 + 5 + core_forward["view"] + (0 if sp else 3) + 2 + 1 + 9 + (6 if sp else 0),
    }
    backward = {
        # 4 data-gradient and 4 weight-gradient GEMMs; the qkv bias gradient's sum; bias_gelu_back;
        # the core attention's; 2 norms' backward_affine calls; 4 weights' `grad +=` (gradientUpdateFunction)
        # less the 1 a layer rank_program already charges
        "aten": 4 + 4 + 1 + 1 + core_backward["aten"] + 2 + 4 - 1,
        # bias-dropout-add's 2 graph backwards and 2 expand sums; the 2 residual forks' gradient sums;
        # the GeLU bias gradient's sum; the core attention's; the qkv split's cat; the norms' 2 further
        # kernels each; 8 AccumulateGrad adds
        "engine": 4 + 2 + 1 + core_backward["engine"] + 1 + 4 + 8,
        # the forward's Functions' Python backwards (the nested ones too: each apply is its own node)
        "function": 2 + 4 + 2 + core_backward["function"] + 1 + (0 if sharded else 2),
        # columns' async all-reduce of the input gradient; with SP instead their re-gather and
        # reduce-scatter, and the rows' all-gather
        "collective": (2 if sharded else 0) + (4 if sp else 0),
        # per linear: contiguous, 2 views, the weight GEMM's transpose, WeightGradStore.put; the columns'
        # waits (with SP: gather buffer, 2 waits, output allocation); the norms' contiguous; with SP the
        # rows' gather allocation and contiguous; the core attention's
        "view": 4 * 5 + ((2 if not sp else 8) if sharded else 0) + 2 + (4 if sp else 0) + core_backward["view"],
    }
    if core_forward["triton"] or core_backward["triton"]:       # Triton kernels launched from Python
        forward["triton"], backward["triton"] = core_forward["triton"], core_backward["triton"]
    return {"forward": forward, "backward": backward}


def layer_host_s(tp: int, dispatch_s: float, sequence_parallel: bool = False,
                 attention: str = "fused") -> tuple[float, float]:
    """Host seconds, (forward, backward), of one legacy Megatron GPT layer and micro-batch with the core
    attention `attention` (a key of CORE_ATTENTION) on a host issuing an op in `dispatch_s`.

    >>> f, b = layer_host_s(8, 13e-6)
    >>> 1e-3 < f + b < 2e-3
    True
    """
    return tuple(priced_s(calls, dispatch_s) for calls in layer_calls(tp, sequence_parallel, attention).values())


def legacy_attention(attention: str, framework: str | None) -> str | None:
    """The legacy layer's core attention path (a key of CORE_ATTENTION) a scenario runs, None if it does not
    run the legacy layer: Megatron-DeepSpeed's scenarios always do (with the attention they name, None for
    one it has no path for), other scenarios when their attention is `fused`."""
    if framework == "megatron-deepspeed":
        return LEGACY_ATTENTION.get(attention)
    return "fused" if attention == "fused" else None


def megatron_layer_host_s(model: ModelSpec | None, par, attention: str, cuda_graphs: bool, host,
                          framework: str | None = None) -> float:
    """Host seconds per transformer layer and micro-batch to add to scalesim's per-kernel count
    (ParallelPlan.pipeline_layer_host_s): what `layer_host_s` counts beyond `layer_kernels`' launches for a
    model (`model`, None for none) run by Megatron's legacy layer (`legacy_attention`: `attention` fused, or
    `framework` megatron-deepspeed) without CUDA graphs, with the scenario's parallel section `par` (tp,
    sequence_parallel) on a node whose `host` may give its dispatch time; 0 otherwise."""
    block = next((layer for layer in model.layers if layer.kind == "transformer_block"), None) if model else None
    core = legacy_attention(attention, framework)
    if block is None or core is None or cuda_graphs:
        return 0.0
    dispatch_s = DISPATCH_S_PER_OP if host.dispatch_us_per_op is None else host.dispatch_us_per_op * 1e-6
    forward, backward, _ = layer_kernels(block, attention)
    generic = launch_host_s(forward, dispatch_s, False) + launch_host_s(backward, dispatch_s, False, backward=True)
    return max(0.0, sum(layer_host_s(par.tp, dispatch_s, par.sequence_parallel, core)) - generic)


def framework_layer_host_s(model: ModelSpec, training, par, servers: int, attention: str, host) -> float:
    """Host seconds per transformer layer and micro-batch beyond the per-kernel count, by the framework the
    scenario's `training` section names or its keys imply: nanotron's layer (`elementwise_kernels` nanotron;
    costs/nanotron_host.py), else Megatron's legacy layer (fused kernels, `attention` fused or framework
    megatron-deepspeed, no CUDA graphs; above)."""
    if training.elementwise_kernels == "nanotron":
        return nanotron_layer_host_s(model, par, servers, attention, host)
    return nanotron_layer_host_s(None, par, servers, attention, host) + megatron_layer_host_s(
        model if training.elementwise_kernels == "fused" else None, par, attention, training.cuda_graphs, host,
        training.framework)
