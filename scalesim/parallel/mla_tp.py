"""Multi-head latent attention's own tensor-parallel collectives under sequence parallelism, with
column-parallel down-projections (`parallel.mla_down_proj: column-parallel`).

Megatron-Core split MLA's down-projections over the TP ranks from 24 Feb 2025 (1c425a8313, "Use
TEColumnParallelLinear instead of TELinear in MLA down proj layers") to 13 Jun 2025 (e63aee46b2, "MLA down
proj switch back to TELinear"): before and since, each TP rank runs them whole (duplicated) and MLA has no
exchanges of its own, the default.

Besides the block's input all-gather and output reduce-scatter (rank_program.py, as for any
attention), Megatron-Core's MLA gathers its low-rank latents (Megatron-LM @3cdfd613, the Megatron-Core
of NeMo 2.3's container, which the TP2 DeepSeek-V3 validation runs use: gpt_layer_specs.py:117-124
makes the down-projections TEColumnParallelLinear, so their outputs come split over the TP ranks;
multi_latent_attention.py get_query_key_value_tensors, lines 383-414):

- forward, five all-gathers: the block's input a second time, by the key-value down-projection (two
  column-parallel linears under sequence parallelism, each gathering its own input [s, b, h]; scalesim's
  block gathers it once); the query latent gathered whole (gather_from_tensor_model_parallel_region,
  [s, b, q_lora_rank]), scattered back to the sequence-parallel shard, and gathered again over the
  sequence by the up-projection (a LayerNorm-column-parallel linear under sequence parallelism); the
  key-value latent with the rotary key the same way ([s, b, kv_lora_rank + qk_rope_head_dim] whole,
  then [s, b, kv_lora_rank] over the sequence);
- backward, five more: the second down-projection's input gradient reduce-scattered ([s, b, h]), the
  scatters' gradients all-gathered and the up-projections' input gradients reduce-scattered
  ([s, b, q_lora_rank] and [s, b, kv_lora_rank] each); the whole-gathers' gradients are splits, no
  communication. (The weight gradients' re-gathers of sequence-parallel inputs are left to
  parallel/sp_backward.py's modes, as for every column-parallel linear.)

Each is a blocking collective on the compute stream (no TP overlap in these recipes), placed here
after the attention part, before its reduce-scatter. Under the mla_up_proj recompute module the
up-projections run again (CheckpointWithoutOutput of qkv_up_proj_and_rope_apply, lines 502-506), and
with them their sequence gathers: two all-gathers before the recomputed forward. Full recomputation
re-runs the whole block's forward, all five forward exchanges with it (the selective `moe` module, which
scalesim replays through the whole layer, re-runs none of MLA in Megatron-Core).
"""

from __future__ import annotations

from scalesim.costs.compute import ELEMENT_BYTES
from scalesim.models.spec import LayerSpec

CALLS_PER_PASS = 5


def latent_calls(layer: LayerSpec, micro_batch: int, element_bytes: float, kind: str) -> list[tuple[str, float]]:
    """(collective, bytes of the whole tensor) of one MLA block's latent exchanges in a `kind` pass
    ('forward', 'backward', or 'mla_up_proj' for that module's recompute; none for other layers).

    >>> from scalesim.models import get_model
    >>> block = get_model("deepseek-v3", seq_len=8).layers[1]
    >>> [size / (8 * 2) for op, size in latent_calls(block, 1, 2, "forward") if op == "all_gather"]
    [7168.0, 1536.0, 1536.0, 576.0, 512.0]
    >>> [op for op, _ in latent_calls(block, 1, 2, "backward")]
    ['reduce_scatter', 'all_gather', 'reduce_scatter', 'all_gather', 'reduce_scatter']
    """
    ops = {op.name: op for op in layer.ops}
    if kind not in ("forward", "backward", "mla_up_proj") or "mla_q_down" not in ops or "mla_kv_up" not in ops:
        return []
    tokens, q_latent, hidden = ops["mla_q_down"].gemm_mnk
    _, kv_latent_rope, _ = ops["mla_kv_down"].gemm_mnk
    kv_latent = ops["mla_kv_up"].gemm_mnk[2]
    per_width = float(micro_batch * tokens * element_bytes)
    if kind == "mla_up_proj":        # the recomputed up-projections' sequence gathers
        widths = (("all_gather", q_latent), ("all_gather", kv_latent))
    elif kind == "forward":
        widths = (("all_gather", hidden), ("all_gather", q_latent), ("all_gather", q_latent),
                  ("all_gather", kv_latent_rope), ("all_gather", kv_latent))
    else:
        widths = (("reduce_scatter", hidden), ("all_gather", q_latent), ("reduce_scatter", q_latent),
                  ("all_gather", kv_latent), ("reduce_scatter", kv_latent))
    return [(op, per_width * width) for op, width in widths]


def exchanged(rp, work, kind: str, wait: int) -> int:
    """The latent collectives of `work` (a block run by RankProgram `rp`) after `wait`; returns what
    follows them waits for. Only with tensor and sequence parallelism."""
    if rp.pl.tp <= 1 or not rp.sp or rp.plan.mla_down_proj != "column-parallel":
        return wait
    if kind == "recompute" and rp.plan.checkpointing == "full":
        kind = "forward"        # full recomputation re-runs the block's whole forward, these exchanges included
    for op, size in latent_calls(work.layer, rp.plan.micro_batch, ELEMENT_BYTES[rp.plan.precision], kind):
        t = rp.call("tp", op, rp.tp_group, size, "tp", (wait,), ("tp",))
        wait = t if t is not None else wait
    return wait


def replayed(rp, work, dep: int | None) -> int | None:
    """The up-projections' sequence gathers again before a selective recompute with mla_up_proj."""
    if (rp.pl.tp <= 1 or not rp.sp or rp.plan.mla_down_proj != "column-parallel"
            or "mla_up_proj" not in rp.plan.recompute_modules or dep is None):
        return dep
    return exchanged(rp, work, "mla_up_proj", dep)
