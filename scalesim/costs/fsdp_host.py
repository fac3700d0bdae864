"""The host side of PyTorch FSDP: the CPU time its hooks spend per unit and per original parameter.

FSDP runs Python hooks around every unit (FSDP1's FlatParameter, FSDP2's fully_shard group) on the
thread that issues the unit's kernels: in the forward (the main thread) and in the backward
(autograd's device thread). While they run, no kernel is issued. Per unit and pass:

- FSDP1 (torch.distributed.fsdp, torch v2.2-v2.5, `use_orig_params=False` as fms-fsdp and
  fsdp_qlora run it; fsdp/_runtime_utils.py, _flat_param.py):
  forward: the pre-forward hook registers the post-backward hook (`flat_param.expand_as`, a
  grad-fn hook), `_unshard` casts the fp32 shard to the low-precision one (allocate + copy),
  allocates the unsharded buffer, launches the all-gather, makes the unsharded views
  (`_use_unsharded_flat_param` -> `_use_unsharded_views`: `torch.split`, then one `.view` and one
  setattr per original parameter, in the forward only without use_orig_params), frees the
  low-precision shard (record_stream, resize_), makes the compute stream wait for the unshard
  stream and casts the inputs; the post-forward hook reshards (the sharded flat parameter back,
  record_stream and resize_(0) of the unsharded buffer, the rate limiter's free event recorded)
  and registers the pre-backward hooks on the outputs.
  backward: the pre-backward hook (and the backward prefetch it runs) does the unshard again
  without the views; the post-backward hook reshards (free event), makes its stream wait for
  the compute stream, allocates the sharded gradient, launches the reduce-scatter (HSDP: and the
  all-reduce), accumulates the shard and records streams. The hook's cast and divide kernels are
  priced with their tasks (parallel/fsdp.py reduce_input).
- FSDP2 (torch.distributed._composable.fsdp, torch v2.4-v2.6, _fsdp_param_group.py, _fsdp_param.py,
  _fsdp_collectives.py): the same events per unit (one copy-in and one copy-out kernel for the
  whole group instead of FSDP1's flat views), but each original parameter is a DTensor of its own:
  every unshard swaps each parameter to its unsharded tensor (`to_unsharded`: an unsafe setattr),
  every reshard back (`to_sharded`: a setattr and the unsharded storage freed), and the
  post-backward wraps each reduced gradient shard in a DTensor (`to_sharded_dtensor`). No rate
  limiter: FSDP2 orders its all-gathers with CUDA events "without any CPU synchronization"
  (torchtitan docs/fsdp.md, "FSDP1 -> FSDP2").

The rate limiter itself (FSDP1's `limit_all_gathers=True`, the default) is a dependency, not a
cost: parallel/fsdp_limiter.py plays it. Pure functions.
"""

from __future__ import annotations

from scalesim.costs.coalesced import SLICE_OP_FRACTION
from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.models.spec import LayerSpec

# One original parameter made a view of the unsharded flat parameter and set on its module (a
# `.view` and an unsafe setattr), or, in FSDP2, swapped between its sharded and unsharded tensor:
# measured 4.268 ms for 400 nn.Parameters (200 nn.Linear with bias in one FSDP unit, world size 2)
# in `unshard()` -> `_use_unsharded_views()` (pytorch/pytorch pull request #96958, "[FSDP] Reduce CPU
# overhead", awgu, March 2023, after its unsafe-setattr change), 10.7 us per parameter, on a host
# whose eager op dispatch is DISPATCH_S_PER_OP (an assumption: the PR gives no CPU; scaled with the
# host's dispatch time like every host cost). The same PR: `_use_sharded_views()` 2.7-2.8 ms and
# `_writeback_orig_params()` 1.07 ms for the 400 (use_orig_params=True only, not modelled).
PARAM_SWAP_S = 4.268e-3 / 400

# Framework ops per unit and hook outside the per-parameter work, from the hooks' code as listed in the
# module docstring: FSDP1's pre-forward with its unshard 12 and post-forward 6 ("forward"), the
# pre-backward's unshard 10, the post-backward hook 12 (HSDP's stream wait and all-reduce 3 more);
# FSDP2's pre-forward with its unshard 10 and post-forward 4, pre-backward 8, post-backward with the
# reduce-scatter 10. Most launch nothing (views, resize_, record_stream, event and stream waits, hook
# registration) or a copy: each is priced as a Python-issued op without autograd or an algorithm
# choice, SLICE_OP_FRACTION of a dispatch (costs/coalesced.py). ESTIMATE: counted from the code, not
# measured.
HOOK_OPS = {1: {"forward": 18, "pre_backward": 10, "post_backward": 12},
            2: {"forward": 14, "pre_backward": 8, "post_backward": 10}}
HSDP_OPS = 3

# Original-parameter swaps (PARAM_SWAP_S each) per parameter and hook (module docstring): FSDP1 makes
# its views in the forward only (`_use_unsharded_flat_param`: `elif in_forward` without
# use_orig_params); FSDP2 swaps each parameter to unsharded and back in each pass and wraps each
# gradient shard in a DTensor after the reduce-scatter.
PARAM_SWAPS = {1: {"forward": 1, "pre_backward": 0, "post_backward": 0},
               2: {"forward": 2, "pre_backward": 1, "post_backward": 2}}


def original_params(layer: LayerSpec) -> int:
    """Original parameters (nn.Parameters) of a layer as an FSDP unit holds them: one weight per GEMM
    (each of an op's separate `parts`, torchtitan's wq, wk, wv) and one per norm; biases are not in
    the model spec and are left out.

    >>> from scalesim.models.spec import OpSpec
    >>> ops = (OpSpec("norm", "norm", 0, 0), OpSpec("qkv", "gemm", 0, 0, (1, 6, 2), parts=(2, 2, 2)),
    ...        OpSpec("attn", "attention", 0, 0), OpSpec("o", "gemm", 0, 0, (1, 2, 2)))
    >>> original_params(LayerSpec("b", "transformer_block", 30, ops, 0.0))
    5
    """
    if layer.params <= 0:
        return 0
    count = sum(max(len(op.parts), 1) for op in layer.ops if op.kind == "gemm")
    count += sum(1 for op in layer.ops if op.kind == "norm")
    return max(count, 1)


def hook_host_s(version: int, params: int, hook: str, dispatch_s: float, hsdp: bool = False) -> float:
    """CPU time of FSDP `version`'s `hook` ("forward": pre- and post-forward; "pre_backward";
    "post_backward") for one unit holding `params` original parameters, on a host whose eager op
    takes `dispatch_s`.

    >>> d = DISPATCH_S_PER_OP
    >>> hook_host_s(1, 18, "forward", d) > hook_host_s(1, 9, "forward", d) > 0
    True
    >>> hook_host_s(1, 18, "pre_backward", d) == hook_host_s(1, 9, "pre_backward", d)
    True
    >>> hook_host_s(2, 9, "post_backward", d) > hook_host_s(1, 9, "post_backward", d)
    True
    """
    if dispatch_s <= 0:
        return 0.0
    ops = HOOK_OPS[version][hook] + (HSDP_OPS if hsdp and hook == "post_backward" else 0)
    swaps = PARAM_SWAPS[version][hook] * params
    return ops * dispatch_s * SLICE_OP_FRACTION + swaps * PARAM_SWAP_S * dispatch_s / DISPATCH_S_PER_OP
