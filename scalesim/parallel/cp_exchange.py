"""Context parallelism's key/value exchange per block: the p2p ring or the all-gather.

Transformer Engine runs context-parallel attention one of two ways here (`cp_comm_type`,
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py @d0067d0d):

- "p2p" (AttnFuncWithCPAndKVP2P; Megatron-LM's default, `--cp-comm-type` default ["p2p"]) passes K and V
  round the ring, each step's transfer beside the previous step's kernel: the exchange runs on the "cp"
  stream beside the block's attention half (costs/context_chunks.py prices the ring's kernels);
- "all_gather" (AttnFuncWithCPAndKVAllGather, "KV all-gather between CP ranks is exposed", after Llama 3,
  Grattafiori et al. 2024, sec. 3.3.2) gathers the whole K and V with `gather_along_first_dim` before
  its two kernels (one per local chunk, over the keys up to the chunk's end: costs/context_chunks.py
  windowed_work), and in backward gathers them again and reduce-scatters dK and dV
  (`reduce_scatter_along_first_dim`) after the kernels, each of them on the compute path. Megatron-Core
  documents the same (TransformerConfig.cp_comm_type: "The all-gather is not async, and cannot be
  overlapped").

A sliding window runs only on the all-gather (or all-to-all) path: attn_forward_func_with_cp asserts
"Context parallelism does not support sliding window attention with cp_comm_type=...". Megatron-Core
takes one cp_comm_type for every layer (`--cp-comm-type all_gather`) or a list with one per layer
(TransformerConfig.cp_comm_type List[str], TransformerLayer picks `cp_comm_type[layer_number - 1]`);
scalesim runs one for the whole model (`parallel.cp_comm_type`): all_gather where the model has a window
(its full-attention layers too, Gemma 2's global layers), else p2p. Ulysses-style "a2a" is not modelled.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import ModelSpec
from scalesim.program import ComputeTask

CP_COMM_TYPES = ("p2p", "all_gather")


def windowed(model: ModelSpec) -> bool:
    """Whether any attention op of `model` has a sliding window."""
    return any(op.kind == "attention" and op.window for layer in model.layers for op in layer.ops)


def gathers(model: ModelSpec, cp: int, comm_type: str | None) -> bool:
    """Whether context parallelism all-gathers K and V: asked for, or by default where `model` has a window.

    >>> from scalesim.models.zoo import get_model
    >>> gathers(get_model("gemma2-9b", seq_len=8192), 2, None), gathers(get_model("llama3-8b", seq_len=8192), 2, None)
    (True, False)
    >>> gathers(get_model("llama3-8b", seq_len=8192), 2, "all_gather"), gathers(get_model("gemma2-9b", seq_len=8192), 1, None)
    (True, False)
    """
    return cp > 1 and (comm_type == "all_gather" or comm_type is None and windowed(model))


def all_gathered(model: ModelSpec) -> ModelSpec:
    """`model` whose every attention op has its K and V all-gathered under context parallelism."""
    layers = tuple(replace(layer, ops=tuple(replace(op, cp_gather=True) if op.kind == "attention" else op
                                            for op in layer.ops)) for layer in model.layers)
    return replace(model, layers=layers)


def _gathered(work) -> bool:
    return any(op.kind == "attention" and op.cp_gather for op in work.layer.ops)


def before(rp, work, i: int, deps) -> tuple[int | None, tuple]:
    """The K/V exchange ahead of part `i` of a layer: (what the part's end waits for, the part's deps).
    The ring runs beside the attention half; the all-gather comes first, the half waiting for it."""
    if not (work.is_block and rp.pl.cp > 1 and i == 0):
        return None, deps
    exchange = rp.call("cp", "all_gather", rp.cp_group, rp.b.cp_bytes, "cp", deps, ("cp",))
    if exchange is None or not _gathered(work):
        return exchange, deps
    return None, (exchange,)


def after(rp, work, i: int, kind: str, wait: int, ring: int | None) -> int:
    """What follows part `i`'s tasks wait for: the ring's exchange too, or (all-gather, backward) the
    reduce-scatter of dK and dV after the kernels."""
    if ring is not None:
        rp.list.append(ComputeTask("cp sync", "other", 0.0, deps=(wait, ring)))
        return len(rp.list) - 1
    if kind == "backward" and i == 0 and work.is_block and rp.pl.cp > 1 and _gathered(work):
        scattered = rp.call("cp", "reduce_scatter", rp.cp_group, rp.b.cp_bytes, "cp", (wait,), ("cp",))
        return wait if scattered is None else scattered
    return wait
