"""Pipeline stages balanced by compute cost, as nanotron places its blocks.

nanotron (src/nanotron/models/base.py `build_model`, @67c5ebb6, the commit its benchmark sweep ran) gives
each pipeline block a cost (models/llama.py `get_block_compute_costs`: a decoder layer
4 * heads * head_dim * hidden + 3 * ffn * hidden, the output head vocab * hidden, every other block 0),
then walks the blocks in order: a block goes to the current rank, and the rank moves on once the
cumulative cost has reached total * (rank + 1) / pp. The first stage, which also holds the embedding,
therefore takes more decoder layers than an even split (8.86B on 2 stages: 18 of 32), the last fewer.
A block that lands exactly on a boundary closes its rank. @67c5ebb6's code as published compares with a
strict '>' (the block would stay and one more join it), but the sweep's own logs place it so, as any
positive cost before the first boundary (none is in that code) would. Its CSV (nanotron bench_final2 rows,
copied in eyao600/Rapid-LLM validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6) logs
world rank 0's `Local Params` (trainer.py: the sum of model.parameters() on that rank): 1.34B on 2 stages
(16 layers of 67.1M, the head 4 layers' cost: the boundary falls exactly after layer 10) prints 940M =
embedding 268.4M + 10 layers in 22 of its 25 successful TP-1 runs, every heatmap run among them (1.01G,
11 layers, in 3); on 4 stages 604M (5 layers) in 14 of 19. Where no block lands on a boundary
(3.57B and 8.86B on 2 and 4 stages: 2.21G / 1.31G and 4.92G / 2.73G) the logs match either rule.
Checked against nanotron's own sweep: on the three runs without data parallelism, whose logged
`Mem Alloc` holds only the optimizer step's state, the first stage's weights, fp32 gradients and Adam
state under this placement are within 1% of it (validation/memory-notes.md).

>>> nanotron_blocks_per_stage([4] * 16, 16, 2), nanotron_blocks_per_stage([4] * 16, 17, 2)
([10, 6], [11, 5])
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
        if i < len(block_costs):
            counts[rank] += 1
        cumulative += cost
        # The last rank keeps whatever follows (the head, then nanotron's zero-cost cast and loss blocks).
        if rank < stages - 1 and cumulative >= total * (rank + 1) / stages:
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

