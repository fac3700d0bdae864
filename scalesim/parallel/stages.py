"""Split a model into pipeline chunks (stages x virtual stages).

The embedding goes with the first chunk and the final norm and output head
with the last, as Megatron-LM places them. Transformer blocks are spread as
evenly as possible; when they do not divide evenly, the chunks that also carry
the embedding or the head get fewer blocks (first, then last, then the second,
the second-to-last, ...), which is how Llama 3 405B's 126 layers sit on 16
stages: 7 blocks on the first and last, 8 on the others (Llama 3 paper, 3.3.2).
A scenario may instead give the split as Megatron-Core does: a pipeline layout
string (`parse_layout`) or the first and last stages' block counts.

>>> split_blocks(126, 16)[:3], split_blocks(126, 16)[-1]
([7, 8, 8], 7)
"""

from __future__ import annotations

from scalesim.errors import InputError
from scalesim.models.spec import LayerSpec, ModelSpec
from scalesim.models.moe import is_mtp

LAYOUT_KEY = "parallel.pipeline_layout"
_SYMBOLS = "EtmL|"
_MAX_SYMBOLS = 100_000


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


def model_chunks(model: ModelSpec, chunks: int,
                 blocks_per_chunk: tuple[int, ...] | None = None) -> list[tuple[LayerSpec, ...]]:
    """The model's layers cut into `chunks` consecutive pieces, in pipeline order: `blocks_per_chunk`
    transformer blocks each (a pipeline layout, `layout_blocks`), else as even as `split_blocks` makes them."""
    layers = list(model.layers)
    # multi-token-prediction modules (after the head) stay with the last chunk, as Megatron places them
    blocks = [i for i, layer in enumerate(layers) if layer.kind == "transformer_block" and not is_mtp(layer)]
    if chunks == 1:
        return [tuple(layers)]
    if not blocks:
        raise InputError(f"pipeline parallelism needs a transformer; {model.name} has no transformer blocks",
                         key="parallel.pp")
    sizes = list(blocks_per_chunk) if blocks_per_chunk is not None else split_blocks(len(blocks), chunks)
    if len(sizes) != chunks or sum(sizes) != len(blocks):
        raise InputError(f"the pipeline layout places {sum(sizes)} transformer blocks in {len(sizes)} chunks; "
                         f"{model.name} has {len(blocks)} and the plan {chunks} chunks", key=LAYOUT_KEY)
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


# Megatron-Core's pipeline layout (--pipeline-model-parallel-layout): chunks in model order split
# by '|', E embedding, t transformer block, m multi-token-prediction layer, L loss (final norm and
# head); 'X*n' and '(...)*n' repeat, commas and spaces are cosmetic (megatron/core/transformer/
# pipeline_parallel_layer_layout.py and docs/source/api-guide/pipeline_parallel_layout.md).


def _layout_bad(text: str, why: str) -> InputError:
    return InputError(f"pipeline_layout {text!r}: {why}; allowed: Megatron-Core's layout string, chunks in model "
                      "order split by '|' with E (embedding, first), t (transformer block), L (loss, last), "
                      "'X*n' and '(...)*n' to repeat, e.g. 'Et*3|(tttt|)*14tt|L'", key=LAYOUT_KEY)


def _expand(text: str, pos: int, depth: int) -> tuple[str, int]:
    """The symbols of `text` from `pos` up to a closing ')' (depth > 0) or the end, repeats unrolled."""
    out, total = [], 0
    while pos < len(text) and text[pos] != ")":
        char = text[pos]
        if char == "(" and depth >= 32:
            raise _layout_bad(text, "parentheses nest over 32 deep")
        if char == "(":
            item, pos = _expand(text, pos + 1, depth + 1)
            if pos >= len(text):
                raise _layout_bad(text, "'(' is never closed")
            pos += 1
        elif char in _SYMBOLS:
            item, pos = char, pos + 1
        else:
            raise _layout_bad(text, f"unexpected {char!r} at position {pos}")
        if pos < len(text) and text[pos] == "*":
            end = pos + 1
            while end < len(text) and text[end].isdigit():
                end += 1
            if end == pos + 1 or int(text[pos + 1:end]) * len(item) > _MAX_SYMBOLS:
                raise _layout_bad(text, f"'*' at position {pos} needs a repeat count (at most {_MAX_SYMBOLS:,} "
                                  "symbols in all)")
            item, pos = item * int(text[pos + 1:end]), end
        out.append(item)
        total += len(item)
        if total > _MAX_SYMBOLS:
            raise _layout_bad(text, f"it unrolls to over {_MAX_SYMBOLS:,} symbols")
    if depth == 0 and pos < len(text):
        raise _layout_bad(text, f"')' at position {pos} closes nothing")
    return "".join(out), pos


def parse_layout(text: str) -> list[str]:
    """Megatron-Core's layout string as its chunks' symbols, in model order.

    >>> parse_layout("Et*3|(tt|)*2,t|L")
    ['Ettt', 'tt', 'tt', 't', 'L']
    """
    return _expand(text.replace(",", "").replace(" ", ""), 0, 0)[0].split("|")


def layout_blocks(text: str, blocks: int, chunks: int, mtp: int = 0) -> tuple[int, ...]:
    """Transformer blocks per chunk under the layout `text`, checked against the model and the plan.
    The model's `mtp` multi-token-prediction modules (m) run on the last chunk, before the loss; a
    layout may leave them out (the recipes' do), not put them elsewhere."""
    parts = parse_layout(text)
    flat = "".join(parts)
    if len(parts) != chunks:
        raise _layout_bad(text, f"it has {len(parts)} chunks but pp x virtual_stages is {chunks}")
    if flat.count("E") != 1 or not parts[0].startswith("E"):
        raise _layout_bad(text, "E (the embedding) must appear once, first")
    if flat.count("L") != 1 or not parts[-1].endswith("L"):
        raise _layout_bad(text, "L (the loss) must appear once, last")
    if "m" in flat and (flat.count("m") != mtp or not parts[-1].rstrip("L").endswith("m" * mtp)):
        raise _layout_bad(text, f"the model has {mtp} multi-token-prediction layers (m); scalesim runs them "
                                "at the end of the last chunk, before L")
    if flat.count("t") != blocks:
        raise _layout_bad(text, f"it places {flat.count('t')} transformer blocks but the model has {blocks}")
    if any(not part for part in parts):
        raise _layout_bad(text, "a chunk is empty (scalesim needs at least one layer in every chunk)")
    return tuple(part.count("t") for part in parts)


def first_last_blocks(blocks: int, pp: int, virtual_stages: int, first: int | None,
                      last: int | None) -> tuple[int, ...]:
    """Blocks per chunk with Megatron-Core's uneven first / last stage (--decoder-first-pipeline-num-layers,
    --decoder-last-pipeline-num-layers): the other stages share the rest evenly, and each stage's
    blocks split evenly over its virtual chunks (megatron/core/transformer/transformer_block.py)."""
    per_stage = [None] * pp
    rest, left = blocks, pp
    for stage, count in ((0, first), (pp - 1, last)):
        if count is not None:
            per_stage[stage], rest, left = count, rest - count, left - 1
    key = "parallel.decoder_first_pipeline_num_layers" if first is not None else \
        "parallel.decoder_last_pipeline_num_layers"
    if pp < 2 or rest < 0 or (rest % left if left else rest):
        raise InputError(f"{first} first and {last} last of {blocks} transformer blocks leave {rest} for the "
                         f"{left} other stages of pp {pp}: they must share them evenly (pp >= 2)", key=key)
    sizes = [rest // left if n is None else n for n in per_stage]
    if any(n % virtual_stages or n == 0 for n in sizes):
        raise InputError(f"stage blocks {sizes} must each be a positive multiple of virtual_stages "
                         f"({virtual_stages})", key=key)
    return tuple(n // virtual_stages for _ in range(virtual_stages) for n in sizes)


def pipeline_blocks(model: ModelSpec, pp: int, chunks_per_stage: int, layout: str | None = None,
                    first: int | None = None, last: int | None = None) -> tuple[int, ...] | None:
    """Blocks per chunk the scenario asks for (a layout string, or first / last stage counts);
    None: the even split of `split_blocks`."""
    if layout is None and first is None and last is None:
        return None
    if layout is not None and (first is not None or last is not None):
        raise InputError("give either pipeline_layout or decoder_first/last_pipeline_num_layers, not both",
                         key=LAYOUT_KEY)
    blocks = sum(layer.kind == "transformer_block" and not is_mtp(layer) for layer in model.layers)
    if layout is not None:
        mtp = sum(layer.kind == "transformer_block" and is_mtp(layer) for layer in model.layers)
        return layout_blocks(layout, blocks, pp * chunks_per_stage, mtp)
    return first_last_blocks(blocks, pp, chunks_per_stage, first, last)
