"""Pipeline stages balanced by compute cost, as nanotron places its blocks.

nanotron (src/nanotron/models/base.py `build_model`, @67c5ebb6, the commit its benchmark sweep ran) gives
each pipeline block a cost (models/llama.py `get_block_compute_costs`: a decoder layer
4 * heads * head_dim * hidden + 3 * ffn * hidden, the output head vocab * hidden, every other block 0),
then walks the blocks in order: a block goes to the current rank, and the rank moves on once the
cumulative cost has passed total * (rank + 1) / pp. The first stage, which also holds the embedding,
therefore takes more decoder layers than an even split (1.34B on 2 stages: 11 of 16), the last fewer.
Checked against nanotron's own sweep: on the three runs without data parallelism, whose logged
`Mem Alloc` holds only the optimizer step's state, the first stage's weights, fp32 gradients and Adam
state under this placement are within 1% of it (validation/memory-notes.md).

>>> nanotron_blocks_per_stage([4] * 16, 16, 2)
[11, 5]
"""

from __future__ import annotations

from scalesim.errors import InputError
from scalesim.models.spec import LayerSpec, ModelSpec

MLP_GEMMS = ("mlp_gate", "mlp_up", "mlp_down", "mlp_fc1", "mlp_fc2")


def nanotron_blocks_per_stage(block_costs: list[float], head_cost: float, stages: int) -> list[int]:
    """Decoder layers on each of `stages` ranks under nanotron's rule (blocks of zero cost omitted)."""
    costs = list(block_costs) + [head_cost]
    total = sum(costs)
    counts, rank, cumulative = [0] * stages, 0, 0.0
    for i, cost in enumerate(costs):
        if rank >= stages:
            raise InputError(f"nanotron's placement runs out of pipeline ranks ({stages})", key="parallel.pp")
        if i < len(block_costs):
            counts[rank] += 1
        cumulative += cost
        if cumulative > total * (rank + 1) / stages:
            rank += 1
    return counts


def nanotron_block_cost(layer: LayerSpec, hidden: int) -> float:
    """nanotron's cost of one decoder layer: 4 h^2 for attention (whatever the KV heads) plus its MLP GEMMs."""
    mlp = sum(op.gemm_mnk[1] * op.gemm_mnk[2] for op in layer.ops
              if op.name in MLP_GEMMS and op.gemm_mnk is not None)
    return 4.0 * hidden * hidden + mlp


def nanotron_blocks(model: ModelSpec, chunks: int) -> tuple[int, ...]:
    """Decoder layers on each of `chunks` pipeline stages as nanotron places them (the embedding goes
    with the first, the final norm and head with the last: stages.model_chunks cuts them so)."""
    layers = list(model.layers)
    blocks = [i for i, layer in enumerate(layers) if layer.kind == "transformer_block"]
    if not blocks or not model.hidden or not model.vocab:
        raise InputError(f"nanotron's pipeline placement needs a transformer with a vocabulary; {model.name} "
                         "has none", key="parallel.pipeline_balance")
    counts = nanotron_blocks_per_stage([nanotron_block_cost(layers[i], model.hidden) for i in blocks],
                                       float(model.vocab * model.hidden), chunks)
    if min(counts) < 1:
        raise InputError(f"nanotron's placement leaves a pipeline stage without decoder layers "
                         f"({counts}); use fewer stages", key="parallel.pp")
    return tuple(counts)

