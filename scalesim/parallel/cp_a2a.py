"""Context parallelism's all-to-all form (`parallel.cp_comm_type: a2a`, Ulysses-style), as Transformer Engine runs it.

AttnFuncWithCPAndQKVOA2A (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
@d0067d0d, `flash_attn_a2a_communicate`):

- forward: Q, K and V go from sequence-sharded to head-sharded ("a2a: gather s and split h",
  [b, s//cp, h, d] -> [b, s, h//cp, d]), one `all_to_all_single` each, issued back to back on NCCL's stream;
  the sequence-chunk reordering of each runs on the cp stream once its exchange is waited, beside the next
  exchange, and the compute stream waits for all of them (`current_stream().wait_stream(cp_stream)`) before
  the attention kernel: the exchange is on the compute path, nothing of the attention overlaps it. Then one
  kernel over the whole sequence (causal over all of it, no ring steps) on heads/cp query heads and
  kv_heads/cp key/value heads, and the output goes back to sequence-sharded ("a2a: split s and gather h"),
  again waited before the projection;
- backward: dO all-to-all'd to head-sharded, the whole-sequence backward kernel, then dQ, dK, dV back to
  sequence-sharded, each waited where it is used (the backward's stream juggling is the forward's);
- each rank keeps 1/cp of every buffer it sends: what crosses the wire per pass is the local Q, K, V and O
  (dO, dQ, dK, dV) bytes times (cp - 1)/cp, nccl-tests' all-to-all (collectives/busbw.py). The tensors go in
  their own dtype: under FP8 attention (delayed scaling, "FP8DS: torch.uint8" for q, k, v, dout and dq, dk,
  dv; the FP8 kernel's out as its `_data`) 1 byte, else the activations' (ELEMENT_BYTES of the plan's
  precision, as the p2p ring's K/V); FP8 current scaling's 16-bit O and dQ, dK, dV are not told apart;
- TE asserts "cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V" (the heads of the TP rank);
  a sliding window is allowed (FusedAttention or FlashAttention >= 2.3).

scalesim places each exchange just before (Q, K, V; dO) and after (O; dQ, dK, dV) its block's attention half
rather than between the half's QKV GEMM and its kernel: the same work on the same compute path. The
momentary reordering copies and the all-to-all's receive buffers are not charged.
"""

from __future__ import annotations


from scalesim.costs.compute import ELEMENT_BYTES
from scalesim.models.packing import with_attention_fields
from scalesim.models.spec import ModelSpec


def all_to_all_model(model: ModelSpec) -> ModelSpec:
    """`model` whose every attention op runs context parallelism's all-to-all form (one whole-sequence kernel)."""
    return with_attention_fields(model, cp_a2a=True)


def head_bytes(model: ModelSpec, plan, heads: int, element: float | None = None) -> float:
    """One rank's local (sequence-sharded) tensor of `heads` heads over this TP rank: a micro-batch's
    tokens/cp tokens x heads/tp x head_dim, `element` bytes an element (the plan's element size)."""
    pl, q_heads = plan.placement, model.heads or 1
    width = max(1, heads // pl.tp) * (model.head_dim or (model.hidden or 0) // q_heads)
    tokens = (model.tokens_per_sample or 1) // pl.cp
    return plan.micro_batch * tokens * width * (element or ELEMENT_BYTES[plan.precision])


def head_split_problem(model: ModelSpec, tp: int, cp: int) -> str | None:
    """Why `model`'s heads cannot be split over `cp` ranks (TE asserts "cp_comm_type='a2a' requires num_heads %
    cp_size == 0 for Q, K, V", the heads of a TP rank), with what is allowed; None when they can.

    >>> from scalesim.models.zoo import get_model
    >>> head_split_problem(get_model("llama2-70b", seq_len=8192), 1, 8) is None
    True
    >>> "[2, 4]" in head_split_problem(get_model("qwen2.5-7b", seq_len=8192), 1, 8)
    True
    """
    heads = {"attention heads": model.heads or 1, "key/value heads": model.kv_heads or model.heads or 1}
    per_rank = {what: max(1, n // tp) for what, n in heads.items()}
    if not any(n % cp for n in per_rank.values()):
        return None
    allowed = [c for c in range(2, 65) if not any(n % c for n in per_rank.values())]
    return (f"a2a splits each TP rank's heads over the cp ranks (Transformer Engine asserts num_heads % cp_size "
            f"== 0 for Q, K, V), but {model.name} has " + ", ".join(f"{n} {what}" for what, n in per_rank.items())
            + f" per TP rank and cp is {cp}; allowed: p2p or all_gather, or a2a with cp in {allowed or 'none'}")


def uses_a2a(work) -> bool:
    return any(op.kind == "attention" and op.cp_a2a for op in work.layer.ops)


def _sizes(model: ModelSpec, plan, before: bool, kind: str, fp8: bool) -> tuple[float, ...]:
    """The all-to-alls' per-rank buffers ahead of (`before`) or after a block's attention half in a `kind` pass:
    Q, K, V then O in forward (and a recomputed forward); dO then dQ, dK, dV in backward; 1 byte under `fp8`
    attention."""
    element = 1 if fp8 else None
    q = head_bytes(model, plan, model.heads or 1, element)
    kv = head_bytes(model, plan, model.kv_heads or model.heads or 1, element)
    qkv = (q, kv, kv)
    if kind == "backward":
        return (q,) if before else qkv
    return qkv if before else (q,)


def exchange(rp, work, kind: str, before: bool, deps) -> tuple:
    """The all-to-alls ahead of or after a block's attention half, one after another on the compute path:
    what follows waits for the returned deps."""
    fp8 = any(op.kind == "attention" and op.fp8 for op in work.layer.ops)
    for size in _sizes(rp.b.model, rp.plan, before, kind, fp8):
        sent = rp.call("cp", "all_to_all", rp.cp_group, size, "cp", deps, ("cp",))
        deps = deps if sent is None else (sent,)
    return deps
