"""The copies around sequence-parallel collectives when activations are (batch, seq, hidden).

Megatron-LM keeps activations sequence-first, (s, b, h), so a sequence-parallel all-gather or
reduce-scatter works on dim 0: NCCL's flat buffer is the tensor itself. torch's DTensor plans, as
torchtitan applies them (`SequenceParallel()` norms and `Shard(1)` block inputs and outputs in
`apply_tp`, models/llama/parallelize_llama.py @9dec370 and @820504e), keep (b, s, h) and shard the
sequence on dim 1. torch's functional collectives gather and scatter on dim 0 only and rearrange
around them (torch/distributed/_functional_collectives.py, `all_gather_tensor`: "if gather_dim != 0
... torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)"; `reduce_scatter_tensor`: "if
scatter_dim != 0: tensor_list = torch.chunk(self, group_size, dim=scatter_dim); self =
torch.cat(tensor_list)" before the call). Each sequence-parallel all-gather is followed, and each
reduce-scatter preceded, by a copy of the whole gathered tensor (read and write), on the compute
stream: a `cat` that Inductor emits as a copy kernel, since the tensors on either side are NCCL's
buffers and cuBLAS GEMM inputs and outputs, with nothing to fuse it into. In backward the gradients
take the mirrored collectives (the all-gather's gradient is a reduce-scatter on dim 1 and the other
way round), one copy each. Under torchao's float8 with tensor parallelism (PrepareFloat8ModuleInput,
which torchtitan applies with float8) the block input is cast before its all-gather, so that
all-gather and its copy move one byte an element, and so is the gradient of a row-parallel output
before backward's all-gather (Float8RowwiseParallel); the reduce-scatters carry 16-bit outputs and
gradients.

Each function takes the RankProgram (rank_program.py) it adds tasks to, as nanotron_dp.py does.
"""

from __future__ import annotations

from scalesim.costs.compute import KERNEL_OVERHEAD_S  # noqa: F401 (the doctest's)
from scalesim.parallel.copies import copy_task

LAYOUTS = ("seq-first", "batch-first")


def copies_around(rp) -> bool:
    """Whether this rank's sequence-parallel collectives carry layout copies."""
    return rp.sp and rp.plan.sequence_parallel_layout == "batch-first"


def gathered_bytes(rp, op: str, kind: str) -> float:
    """Bytes of the tensor a sequence-parallel call moves: one byte an element for an FP8 block input
    gathered after its cast; in backward's pair (an all-gather of the output gradient, a reduce-scatter
    of the input gradient, timed as one all-reduce), the gradient of a float8 row-parallel output is
    cast before its all-gather (torchao Float8RowwiseParallel: NoopFwToFloat8BwDynamic casts it, its
    all-gather runs on the float8 data, float8_ops.py allgather_fp8), the reduce-scatter at 16 bits:
    3/4 of the 16-bit pair, and of its two copies; the activations' own bytes otherwise."""
    whole = rp.b.activation_bytes
    if rp.plan.precision == "fp8" and op == "all_gather":
        return whole / 2
    if rp.plan.precision == "fp8" and op == "all_reduce" and kind == "backward":
        return 0.75 * whole
    return whole


def layout_copy(rp, kind: str, deps, size: float) -> int:
    """A copy of `size` bytes (read once, written once) on the compute stream after `deps`.

    >>> from types import SimpleNamespace as NS
    >>> from scalesim.hardware import get_gpu
    >>> class RP:
    ...     def __init__(self):
    ...         self.b, self.plan, self.seconds = NS(gpu=get_gpu("h100-sxm")), NS(host_dispatch_s=0.0), []
    ...     def compute(self, name, kind, seconds, flop, deps, host_s=0.0):
    ...         self.seconds.append(seconds)
    ...         return 7
    >>> rp = RP()
    >>> layout_copy(rp, "forward", (3,), 1e9), layout_copy(rp, "forward", (3,), 2e9)
    (7, 7)
    >>> round((rp.seconds[1] - KERNEL_OVERHEAD_S) / (rp.seconds[0] - KERNEL_OVERHEAD_S), 6)
    2.0
    """
    return copy_task(rp, "sequence-parallel layout copy", kind, size, deps)
