"""Memory nanotron's tensor-parallel linears hold beyond what each block saves for backward.

nanotron's TP linears in REDUCE_SCATTER (sequence-parallel) mode with async communication, as its
benchmark ran them (examples/config_tiny_llama_bench.yaml: tp_mode REDUCE_SCATTER,
tp_linear_async_communication true; src/nanotron/parallel/tensor_parallel/functional.py @67c5ebb6),
gather the sequence into buffers of nanotron's global `MemoryBuffer` (parallel/utils.py: a Singleton
dict keyed by (name, dtype), grown to the largest request and never freed):

- "allgather": `_ColumnLinearAsyncCommunication` gathers the column linears' (s/t, b, h) input into it,
  in forward and again in backward (tp_recompute_allgather true, nanotron's default: the input's shard
  is what the block saves). Nanotron's Llama has three column linears, all with input width h: qkv_proj,
  gate_up_proj and lm_head, so the buffer is s*b*h elements.
- "allgather2": `_RowLinearAsyncCommunication.backward` gathers the row linears' (s/t, b, h) output
  gradient into it before the input-gradient GEMMs (o_proj and down_proj, output width h): s*b*h.

Both live from the first step to the end of the run, on every rank with tensor parallelism (with one TP
rank the linears return before asking for them), in the 16-bit training type: two full-sequence
activations a rank holds beside the saved ones, whatever the TP degree.

With `tp_recompute_allgather: false` (nanotron's parallelism option) the column linears gather into a
fresh `torch.empty` tensor instead and save it for backward (`ctx.save_for_backward(gathered_tensor,
weight)`, and `total_input` in `_ColumnLinearNoAsyncCommunicationReduceScatterMode`): each keeps the
whole sequence of its input, not its 1/t shard, and the "allgather" buffer is never asked for.
"""

from __future__ import annotations

from dataclasses import replace

# nanotron's MemoryBuffer entries its async sequence-parallel TP linears use: "allgather", "allgather2".
NANOTRON_TP_GATHER_BUFFERS = 2
# Column-parallel linears of a Llama block, each with an h-wide input: qkv_proj and gate_up_proj
# (nanotron models/llama.py: CausalSelfAttention.qkv_proj, MLP.gate_up_proj are TensorParallelColumnLinear).
BLOCK_COLUMN_LINEARS = 2


def nanotron_tp_gather_buffers(recompute_allgather: bool) -> int:
    """MemoryBuffer entries nanotron's TP linears keep: both, or only the row linears' "allgather2" when
    the column linears save their gathered input."""
    return NANOTRON_TP_GATHER_BUFFERS if recompute_allgather else NANOTRON_TP_GATHER_BUFFERS - 1


def with_gathered_inputs(layers, tp: int, tokens: float, hidden: int) -> tuple:
    """`layers` (one stage, already split by TP with sequence parallelism) whose column-parallel linears
    keep their all-gathered input: a block's two h-wide inputs and the output head's each hold the whole
    sequence, (1 - 1/t) * s * h 16-bit elements a sample more than their shard.

    >>> from scalesim.models.transformer import lm_head
    >>> head = lm_head(8, 16, 100, tied=False)
    >>> with_gathered_inputs((head,), 4, 8, 16)[0].activation_bytes - head.activation_bytes == 0.75 * 8 * 16 * 2
    True
    """
    if tp <= 1:
        return tuple(layers)
    per_input = (1 - 1 / tp) * tokens * hidden * 2.0

    def extra(layer) -> float:
        if layer.kind == "transformer_block":
            return BLOCK_COLUMN_LINEARS * per_input
        return per_input if layer.name == "lm_head" else 0.0
    return tuple(replace(layer, activation_bytes=layer.activation_bytes + extra(layer)) if extra(layer) else layer
                 for layer in layers)


def tp_gather_buffer_bytes(buffers: int, micro_batch: int, tokens: float, hidden: int, element_bytes: float,
                           tp: int, sequence_parallel: bool) -> float:
    """Bytes of the `buffers` full-sequence all-gather buffers a TP rank keeps (0 without TP or SP).

    >>> tp_gather_buffer_bytes(2, 8, 4096, 4096, 2, 8, True) == 2 * 8 * 4096 * 4096 * 2
    True
    >>> tp_gather_buffer_bytes(2, 8, 4096, 4096, 2, 1, True), tp_gather_buffer_bytes(2, 8, 4096, 4096, 2, 8, False)
    (0.0, 0.0)
    """
    if buffers <= 0 or tp <= 1 or not sequence_parallel:
        return 0.0
    return float(buffers * micro_batch * tokens * hidden * element_bytes)
