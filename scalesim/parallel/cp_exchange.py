"""Context parallelism's key/value exchange per block: the p2p ring or the all-gather.

Transformer Engine runs context-parallel attention one of two ways here (`cp_comm_type`,
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py @d0067d0d):

- "p2p" (AttnFuncWithCPAndKVP2P; Megatron-LM's default, `--cp-comm-type` default ["p2p"]) passes K and V
  round the ring, each step's transfer beside the previous step's kernel: the exchange runs on the "cp"
  stream beside the block's attention half (costs/context_chunks.py prices the ring's kernels). Its
  backward passes the accumulated dK and dV round the ring with K and V, one send/recv a step issued
  before the step's kernel and waited after it (`ring_bytes`: twice the forward's bytes, still beside
  the kernels);
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
(its full-attention layers too, Gemma 2's global layers), else p2p. "a2a" (AttnFuncWithCPAndQKVOA2A,
Ulysses-style) all-to-alls Q, K, V to heads/cp around one whole-sequence kernel (parallel/cp_a2a.py).
"torch_ring" is PyTorch's own ring as torchtitan runs it (parallel/torch_ring.py): all-gathers and fp32 dK/dV
hops on the compute path.
"""

from __future__ import annotations


from scalesim.costs.compute import ELEMENT_BYTES
from scalesim.models.packing import with_attention_fields
from scalesim.models.spec import ModelSpec
from scalesim.parallel import cp_a2a, torch_ring
from scalesim.program import ComputeTask

CP_COMM_TYPES = ("p2p", "all_gather", "torch_ring", "a2a")


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
    return with_attention_fields(model, cp_gather=True)


def kv_bytes(model: ModelSpec, plan, heads: int | None = None) -> float:
    """K and V of a micro-batch's whole sequence with one TP rank's KV heads (or `heads`), the config's head_dim
    wide: what the CP group exchanges a layer (the all-gather's output): every rank's local K and V."""
    local = cp_a2a.head_bytes(model, plan, heads or model.kv_heads or model.heads or 1)
    return 2 * local * plan.placement.cp


def gather_buffer_bytes(model: ModelSpec, plan) -> float:
    """The all-gather's full-sequence buffers at the memory peak, in backward: AttnFuncWithCPAndKVAllGather.backward
    @d0067d0d allocates dk, dv at the gathered length ("dk: fwd_nominal_dtype, [cp*s, b, h, d]", torch.zeros) and
    gathers k_ag, v_ag again; the forward's k_ag, v_ag are locals freed when it returns (ctx saves the local k,
    v), so one layer's set is live at a time: gathered K and V plus dK and dV, twice `kv_bytes`. The momentary
    index_select copies (sequence-order reordering) and the per-step dK/dV pieces are left out."""
    gathered = any(op.kind == "attention" and op.cp_gather for layer in model.layers for op in layer.ops)
    return 2 * kv_bytes(model, plan) if gathered and plan.placement.cp > 1 else 0.0


def _gathered(work) -> bool:
    return any(op.kind == "attention" and op.cp_gather for op in work.layer.ops)


def ring_bytes(cp_bytes: float, kind: str) -> float:
    """What the p2p ring moves in a `kind` pass, as the all-gather of that many bytes over the CP group.

    Backward passes dK and dV round the ring beside K and V (AttnFuncWithCPAndKVP2P.backward @d0067d0d:
    `p2p_comm_buffers` of shape (2, *kv.shape), kv.dtype; step 0 sends K/V, steps 1..cp-2 both, the last step
    dK/dV only), cp - 1 chunks of each: twice the forward's volume, in the K/V's own dtype (not fp32).

    >>> ring_bytes(8.0, "forward"), ring_bytes(8.0, "recompute"), ring_bytes(8.0, "backward")
    (8.0, 8.0, 16.0)
    """
    return cp_bytes * (2 if kind == "backward" else 1)


def before(rp, work, i: int, deps, kind: str) -> tuple[int | None, tuple]:
    """The K/V exchange ahead of part `i` of a layer in a `kind` pass: (what the part's end waits for, the
    part's deps). The ring runs beside the attention half, in backward with dK and dV too; the all-gather
    (TE's, or torch's ring's) comes first, the half waiting for it."""
    if not (work.is_block and rp.pl.cp > 1 and i == 0):
        return None, deps
    if cp_a2a.uses_a2a(work):       # Q, K, V (backward: dO) to heads/cp, the half waiting for them (cp_a2a.py)
        return None, cp_a2a.exchange(rp, work, kind, True, deps)
    if rp.plan.cp_torch_ring:       # K and V as SDPA gets them, every query head (torch_ring.py)
        exchange = rp.call("cp", "all_gather", rp.cp_group, kv_bytes(rp.b.model, rp.plan, rp.b.model.heads),
                           "cp", deps, ("cp",))
        return None, deps if exchange is None else (exchange,)
    gathered = _gathered(work)
    size = rp.b.cp_bytes if gathered else ring_bytes(rp.b.cp_bytes, kind)
    exchange = rp.call("cp", "all_gather", rp.cp_group, size, "cp", deps, ("cp",))
    if exchange is None or not gathered:
        return exchange, deps
    return None, (exchange,)


def after(rp, work, i: int, kind: str, wait: int, ring: int | None) -> int:
    """What follows part `i`'s tasks wait for: the ring's exchange too, or (all-gather, backward) the
    reduce-scatter of dK and dV after the kernels."""
    exchanging = i == 0 and work.is_block and rp.pl.cp > 1      # the part whose tasks carry the exchange
    if exchanging and cp_a2a.uses_a2a(work):     # O (backward: dQ, dK, dV) back
        return cp_a2a.exchange(rp, work, kind, False, (wait,))[0]
    if ring is not None:
        rp.list.append(ComputeTask("cp sync", "other", 0.0, deps=(wait, ring)))
        return len(rp.list) - 1
    if kind == "backward" and exchanging and rp.plan.cp_torch_ring:
        local = kv_bytes(rp.b.model, rp.plan, rp.b.model.heads) / rp.pl.cp      # this rank's dK and dV, in fp32
        return torch_ring.gradient_hops(rp, wait, local * torch_ring.FP32_BYTES / ELEMENT_BYTES[rp.plan.precision])
    if kind == "backward" and exchanging and _gathered(work):
        scattered = rp.call("cp", "reduce_scatter", rp.cp_group, rp.b.cp_bytes, "cp", (wait,), ("cp",))
        return wait if scattered is None else scattered
    return wait
