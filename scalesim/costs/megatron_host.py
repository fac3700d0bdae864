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

It prices scenarios whose attention is Megatron's fused scale-mask-softmax (`attention: fused`, the
legacy layer's path) without CUDA graphs; Megatron-Core's Transformer Engine layers are other code,
not counted here.
"""

from __future__ import annotations

from scalesim.costs.host import DISPATCH_S_PER_OP, launch_host_s, layer_kernels
from scalesim.costs.nanotron_host import nanotron_layer_host_s, priced_s
from scalesim.models import ModelSpec


def layer_calls(tp: int, sequence_parallel: bool = False) -> dict[str, dict[str, int]]:
    """Calls of each kind one GPT layer and micro-batch issues, {"forward": {kind: n}, "backward": ...}
    (kinds as costs/nanotron_host.py's; the sites: validation/megatron-host-notes.md).

    >>> layer_calls(2)["forward"]["collective"], layer_calls(2, True)["forward"]["collective"]
    (2, 4)
    >>> layer_calls(1)["forward"]["function"], layer_calls(8)["forward"]["function"]
    (12, 10)
    """
    sharded = tp > 1
    sp = sharded and sequence_parallel
    forward = {
        # 2 norms' kernels; qkv GEMM and bias add; baddbmm, fused softmax, dropout, bmm, the context's
        # permute copy; the dense GEMM; 2 bias-dropout-add TorchScript calls; fc1 GEMM, bias-GeLU, fc2 GEMM
        "aten": 2 + 2 + 5 + 1 + 2 + 1 + 1 + 1,
        # 2 FusedLayerNormAffineFunction, 4 linears, 2 reduce_from (or reduce-scatter) regions, the fused
        # softmax, GeLUFunction; at TP 1 the two column linears' copy_to regions (the async all-reduce
        # inside the linear replaces them at TP > 1)
        "function": 2 + 4 + 2 + 1 + 1 + (0 if sharded else 2),
        # the rows' all-reduces (reduce-scatters with SP), the columns' all-gathers with SP
        "collective": (2 if sharded else 0) + (2 if sp else 0),
        # apex's 3 contiguous calls a norm; 4 weight transposes; the qkv layout's view, split, reshape and
        # 2 squeezes; core attention's 15 views and buffer gets; the RNG tracker's get/set/set (not with SP:
        # transformer.py:322-325); 2 bias expand_as; make_viewless_tensor; 12 nn.Module calls; with SP the
        # columns' gather buffers (2) and the reduce-scatters' output allocation and contiguous (4)
        "view": 6 + 4 + 5 + 15 + (0 if sp else 3) + 2 + 1 + 12 + (6 if sp else 0),
    }
    backward = {
        # 4 data-gradient and 4 weight-gradient GEMMs; the qkv bias gradient's sum; bias_gelu_back;
        # the softmax backward; 2 norms' backward_affine calls; 4 weights' `grad +=` (gradientUpdateFunction)
        # less the 1 a layer rank_program already charges
        "aten": 4 + 4 + 1 + 1 + 1 + 2 + 4 - 1,
        # bias-dropout-add's 2 graph backwards and 2 expand sums; the 2 residual forks' gradient sums;
        # the GeLU bias gradient's sum; bmm's 2 and baddbmm's 4 (2 GEMMs, 2 alpha scalings) and the dropout's
        # backward; the qkv split's cat; the norms' 2 further kernels each; 8 AccumulateGrad adds
        "engine": 4 + 2 + 1 + 7 + 1 + 4 + 8,
        # the forward's Functions' Python backwards (the nested ones too: each apply is its own node)
        "function": 2 + 4 + 2 + 1 + 1 + (0 if sharded else 2),
        # columns' async all-reduce of the input gradient; with SP instead their re-gather and
        # reduce-scatter, and the rows' all-gather
        "collective": (2 if sharded else 0) + (4 if sp else 0),
        # per linear: contiguous, 2 views, the weight GEMM's transpose, WeightGradStore.put; the columns'
        # waits (with SP: gather buffer, 2 waits, output allocation); the norms' contiguous; with SP the
        # rows' gather allocation and contiguous
        "view": 4 * 5 + ((2 if not sp else 8) if sharded else 0) + 2 + (4 if sp else 0),
    }
    return {"forward": forward, "backward": backward}


def layer_host_s(tp: int, dispatch_s: float, sequence_parallel: bool = False) -> tuple[float, float]:
    """Host seconds, (forward, backward), of one legacy Megatron GPT layer and micro-batch on a host
    issuing an op in `dispatch_s`.

    >>> f, b = layer_host_s(8, 13e-6)
    >>> 1e-3 < f + b < 2e-3
    True
    """
    return tuple(priced_s(calls, dispatch_s) for calls in layer_calls(tp, sequence_parallel).values())


def megatron_layer_host_s(model: ModelSpec | None, par, attention: str, cuda_graphs: bool, host) -> float:
    """Host seconds per transformer layer and micro-batch to add to scalesim's per-kernel count
    (ParallelPlan.pipeline_layer_host_s): what `layer_host_s` counts beyond `layer_kernels`' launches for a
    model (`model`, None for none) run by Megatron's legacy layer (`attention` fused) without CUDA graphs,
    with the scenario's parallel section `par` (tp, sequence_parallel) on a node whose `host` may give
    its dispatch time; 0 otherwise."""
    block = next((layer for layer in model.layers if layer.kind == "transformer_block"), None) if model else None
    if block is None or attention != "fused" or cuda_graphs:
        return 0.0
    dispatch_s = DISPATCH_S_PER_OP if host.dispatch_us_per_op is None else host.dispatch_us_per_op * 1e-6
    forward, backward, _ = layer_kernels(block, attention)
    generic = launch_host_s(forward, dispatch_s, False) + launch_host_s(backward, dispatch_s, False, backward=True)
    return max(0.0, sum(layer_host_s(par.tp, dispatch_s, par.sequence_parallel)) - generic)


def framework_layer_host_s(model: ModelSpec, elementwise_kernels: str, cuda_graphs: bool, par, servers: int,
                           attention: str, host) -> float:
    """Host seconds per transformer layer and micro-batch beyond the per-kernel count, by the framework the
    scenario's keys imply: nanotron's layer (`elementwise_kernels` nanotron; costs/nanotron_host.py), else
    Megatron's legacy layer (fused kernels, `attention` fused, no CUDA graphs; above)."""
    if elementwise_kernels == "nanotron":
        return nanotron_layer_host_s(model, par, servers, attention, host)
    return nanotron_layer_host_s(None, par, servers, attention, host) + megatron_layer_host_s(
        model if elementwise_kernels == "fused" else None, par, attention, cuda_graphs, host)
