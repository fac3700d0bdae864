"""Split a model into pipeline chunks (stages x virtual stages).

The embedding goes with the first chunk and the final norm and output head
with the last, as Megatron-LM places them. Transformer blocks are spread as
evenly as possible; when they do not divide evenly, the chunks that also carry
the embedding or the head get fewer blocks (first, then last, then the second,
the second-to-last, ...), which is how Llama 3 405B's 126 layers sit on 16
stages: 7 blocks on the first and last, 8 on the others (Llama 3 paper, 3.3.2).

>>> split_blocks(126, 16)[:3], split_blocks(126, 16)[-1]
([7, 8, 8], 7)
"""

from __future__ import annotations

from scalesim.errors import InputError
from scalesim.models.spec import LayerSpec, ModelSpec


def split_blocks(blocks: int, chunks: int) -> list[int]:
    if blocks < chunks:
        raise InputError(f"{blocks} transformer blocks cannot fill {chunks} pipeline chunks (pp x virtual_stages); "
                         "at least one block per chunk is needed", key="parallel.pp")
    base = -(-blocks // chunks)
    sizes = [base] * chunks
    deficit = base * chunks - blocks
    order = []
    lo, hi = 0, chunks - 1
    while lo <= hi:
        order.append(lo)
        if hi != lo:
            order.append(hi)
        lo, hi = lo + 1, hi - 1
    i = 0
    while deficit:
        sizes[order[i % len(order)]] -= 1
        deficit -= 1
        i += 1
    return sizes


def model_chunks(model: ModelSpec, chunks: int) -> list[tuple[LayerSpec, ...]]:
    """The model's layers cut into `chunks` consecutive pieces, in pipeline order."""
    layers = list(model.layers)
    blocks = [i for i, layer in enumerate(layers) if layer.kind == "transformer_block"]
    if chunks == 1:
        return [tuple(layers)]
    if not blocks:
        raise InputError(f"pipeline parallelism needs a transformer; {model.name} has no transformer blocks",
                         key="parallel.pp")
    sizes = split_blocks(len(blocks), chunks)
    first, last = blocks[0], blocks[-1]
    out, start = [], first
    for k, size in enumerate(sizes):
        end = start + size
        lo = 0 if k == 0 else start
        hi = len(layers) if k == chunks - 1 else end
        out.append(tuple(layers[lo:hi]))
        start = end
    assert sum(len(c) for c in out) == len(layers) and start == last + 1
    return out
