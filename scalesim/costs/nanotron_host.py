"""Host work of one nanotron Llama decoder layer and micro-batch, counted from nanotron's code.

scalesim's generic host model (costs/host.py) charges a layer one dispatch per kernel its ops launch
(`layer_kernels`, about 35 for a Llama block). nanotron's decoder layer (huggingface/nanotron branch
nouamane/bench2 @67c5ebb6, the ultrascale playbook's benchmark sweep: torch 2.1 / cu121 per its
run_multinode.sh, tp_mode REDUCE_SCATTER with tp_linear_async_communication, tp_recompute_allgather
on, flash-attn 2.x) issues far more from Python: custom autograd Functions for every TP linear, the
norms, the rotary embedding and the attention; Triton kernels launched by Triton's Python launcher
(flash-attn's RMSNorm and rotary kernels); torch.distributed collectives; and the views, splits and
allocations around them. `LAYER_CALLS` counts them, site by site (validation/nanotron-tp-host-notes.md
has the table with file:line); `layer_host_s` prices them with the figures below. Pure functions.
"""

from __future__ import annotations

from scalesim.costs.coalesced import VIEW_OP_FRACTION
from scalesim.costs.host import BACKWARD_DISPATCH_FRACTION, DISPATCH_S_PER_OP, launch_host_s, layer_kernels
from scalesim.costs.host import nanotron_pipeline_layer_s
from scalesim.models import ModelSpec

# A Triton kernel launched from Python through Triton's JIT launcher (JITFunction.run: argument binding,
# specialisation key, cache lookup, then the C launcher). MEASURED: 40 us for a kernel with a few
# parameters, 62 us with many, with the Triton 2 that shipped with PyTorch 2.2 (triton-lang/triton pull
# request #3503, "Low latency kernel launching", its benchmark section); Triton's own launch benchmark
# gave 108 us before the launcher was rewritten in April 2024 (pull request #3638; issue #3619 traces
# 70-350 us over the preceding months). flash-attn's `_layer_norm_fwd_1pass_kernel` / `_layer_norm_bwd_kernel`
# (flash_attn/ops/triton/layer_norm.py, behind @triton.autotune and three to five @triton.heuristics
# wrappers) and `rotary_kernel` (ops/triton/rotary.py) take 20-40 arguments each: the many-parameter figure.
TRITON_LAUNCH_S = 62e-6

# A custom torch.autograd.Function's apply beyond the ops its forward runs: the Python-level
# `Function.apply`, the ctx object, the graph node and the input/output wrapping. MEASURED: 17 us for
# 13 inputs and 2 outputs against a direct call of the same body (pytorch/pytorch issue #189573, the
# maintainers' benchmark; 4.7 us on an H200 host with PyTorch 2.13 in its thread, after several speed-ups).
# ESTIMATE: the engine's call into the Function's Python backward (PyNode: the GIL, wrapping the incoming
# gradients, unwrapping the returned ones) costs the same.
AUTOGRAD_FUNCTION_S = 17e-6

# A torch.distributed collective on NCCL (`dist.all_gather_into_tensor` / `reduce_scatter_tensor`):
# the Python wrapper's checks, ProcessGroupNCCL's collective() (the communicator lookup, the event
# handshake between the caller's stream and NCCL's, recordStream on the tensors, the Work object) and
# NCCL's own kernel launch. No published per-call CPU figure was found; ESTIMATE: one Python-issued
# op's dispatch (DISPATCH_S_PER_OP). `Work.wait()` (the caller's stream waits on NCCL's event, no host
# block) is priced as a call that launches nothing (VIEW_OP_FRACTION).

# What each kind of call costs, as a multiple of the host's dispatch time per op (DISPATCH_S_PER_OP
# on the reference host; a node's `host.dispatch_us_per_op` scales every one).
PRICE = {
    "aten": 1.0,                                   # Python-issued op that launches a kernel (costs/host.py)
    "engine": BACKWARD_DISPATCH_FRACTION,          # a kernel autograd's C++ engine issues
    "view": VIEW_OP_FRACTION,                      # Python tensor call that launches nothing (costs/coalesced.py)
    "triton": TRITON_LAUNCH_S / DISPATCH_S_PER_OP,
    "function": AUTOGRAD_FUNCTION_S / DISPATCH_S_PER_OP,
    "collective": 1.0,
}


def priced_s(calls: dict[str, int], dispatch_s: float) -> float:
    """Host seconds of `calls` (kind -> count, kinds of PRICE) on a host issuing an op in `dispatch_s`."""
    return sum(n * PRICE[kind] for kind, n in calls.items()) * dispatch_s


def _gemms(tp: int) -> int:
    """GEMMs of an async column linear's forward (and a row linear's input gradient): the local shard's,
    then those before and after it in the gathered sequence (functional.py:198-252, 531-563). The busiest
    rank, a middle one, sets the pace: every collective waits for all ranks."""
    return 1 if tp == 1 else min(tp, 3)


def layer_calls(tp: int, grouped_query: bool = False) -> dict[str, dict[str, int]]:
    """Calls of each kind one decoder layer and micro-batch issues, {"forward": {kind: n}, "backward": ...}
    (the sites: validation/nanotron-tp-host-notes.md).

    >>> layer_calls(8)["forward"]["collective"], layer_calls(8)["backward"]["collective"]
    (4, 6)
    >>> layer_calls(1)["forward"]["collective"], layer_calls(1)["forward"]["triton"]
    (0, 4)
    """
    g, sharded = _gemms(tp), tp > 1
    layout = (3, 7) if grouped_query else (1, 2)      # qkv split: 3 transpose-contiguous copies, or 1 permute copy
    column_views = 7 + 4 * (g - 1) if sharded else 1
    forward = {
        # 2 column linears (qkv, gate_up), 2 row linears (o, down) and their GEMMs; the qkv layout copy, the
        # k/v cat and permute copy; cu_seqlens' 2 zeros, 2 sums, 2 cumsums; flash-attn's varlen forward;
        # 2 residual adds; SiLU and the gate product
        "aten": 2 * g + 2 + layout[0] + 2 + 6 + 1 + 2 + 2,
        "triton": 2 + 2,                               # 2 RMSNorm forwards, rotary on q and on kv
        # LayerNormFn x2, column x2, row x2 (+ the reduce-scatter Function each calls), ApplyRotaryEmb,
        # ApplyRotaryEmbKV_, FlashAttnVarlenFunc
        "function": 2 + 2 + 2 + (2 if sharded else 0) + 2 + 1,
        "collective": 4 if sharded else 0,             # all-gather before each column, reduce-scatter after each row
        # norms' reshapes and output allocations (4 each); column linears' buffer views, splits, waits;
        # layout views; cat's unsqueezes and permute; rotary's cos/sin/device context/kv slice; k/v split
        # and flash views; cu_seqlens slices; attention output views; row reduce-scatters' contiguous and
        # allocation; the gate split; 14 nn.Module calls
        "view": 8 + 2 * column_views + layout[1] + 3 + 7 + 4 + 2 + 3 + (4 if sharded else 0) + 1 + 14,
    }
    backward = {
        # row linears: g input-gradient GEMMs + 1 weight-gradient GEMM; column linears: 2 GEMMs; norms'
        # weight-gradient sum and cast (2 each); flash-attn's varlen backward; 6 fp32 gradient adds
        # (FP32GradientAccumulator._accumulate_grad, one a parameter tensor) less the 1 a layer
        # rank_program already charges
        "aten": 2 * (g + 1) + 2 * 2 + 2 * 2 + 1 + 5,
        # the 2 residual forks' gradient sums, SwiGLU's 2 muls, SiLU and split; the attention output's
        # reshape copy; flash-attn backward's 3 kernels beyond its call; the k/v split's and the q/k/v
        # unbind's stacks and the qkv reshape copy
        "engine": 2 + 4 + 1 + 3 + 3,
        "triton": 2 + 2,
        "function": 2 + 2 + 2 + 2 + 1,                 # the Functions' Python backwards (nested ones make no node)
        "collective": 6 if sharded else 0,             # row: all-gather of the gradient; column: re-gather, reduce-scatter
        # buffer views, splits, waits (1 a row, 2 a column linear), flash's 3 allocations and 3 slices,
        # rotary's slices, the norms' reshapes and allocations
        "view": 2 * ((10 + 2 * g) if sharded else 5) + 2 * (7 + 2 if sharded else 3) + 6 + 4 + 2 * 5,
    }
    return {"forward": forward, "backward": backward}


def layer_host_s(tp: int, dispatch_s: float, grouped_query: bool = False) -> tuple[float, float]:
    """Host seconds, (forward, backward), of one nanotron decoder layer and micro-batch on a host issuing
    an op in `dispatch_s`.

    >>> f, b = layer_host_s(8, 13e-6)
    >>> 1e-3 < f + b < 3e-3
    True
    """
    return tuple(priced_s(calls, dispatch_s) for calls in layer_calls(tp, grouped_query).values())


def nanotron_layer_host_s(model: ModelSpec | None, par, servers: int, attention: str, host) -> float:
    """Host seconds per decoder layer and micro-batch to add to scalesim's per-kernel count
    (ParallelPlan.pipeline_layer_host_s), for the scenario's parallel section `par` (tp, pp,
    pipeline_balance) on `servers` servers and a node whose `host` may give its dispatch time: with
    nanotron's pipeline across servers, its floor (costs/host.py NANOTRON_PP_LAYER_S, the measured time
    per layer, so it already holds what the count below adds); else, for a nanotron model
    (`model`; None for others), what `layer_host_s` counts beyond the per-kernel count of its decoder block."""
    floor = nanotron_pipeline_layer_s(par.tp, par.pp, servers) if par.pipeline_balance == "nanotron" else 0.0
    block = next((layer for layer in model.layers if layer.kind == "transformer_block"), None) if model else None
    if floor > 0 or block is None:
        return floor
    dispatch_s = DISPATCH_S_PER_OP if host.dispatch_us_per_op is None else host.dispatch_us_per_op * 1e-6
    grouped = bool(model.kv_heads) and model.kv_heads != model.heads
    forward, backward, _ = layer_kernels(block, attention)
    generic = launch_host_s(forward, dispatch_s, False) + launch_host_s(backward, dispatch_s, False, backward=True)
    return max(0.0, sum(layer_host_s(par.tp, dispatch_s, grouped)) - generic)
