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
"""

from __future__ import annotations

# nanotron's MemoryBuffer entries its async sequence-parallel TP linears use: "allgather", "allgather2".
NANOTRON_TP_GATHER_BUFFERS = 2


def tp_gather_buffer_bytes(buffers: int, micro_batch: int, tokens: int, hidden: int, element_bytes: float,
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
