"""nanotron's compute-cost pipeline placement (models/base.py build_model)."""

import pytest

from scalesim.errors import InputError
from scalesim.models import get_model
from scalesim.parallel.cost_balance import nanotron_blocks, nanotron_blocks_per_stage
from scalesim.parallel.stages import model_chunks


def test_every_layer_lands_on_exactly_one_stage_in_order():
    model = get_model("llama3-8b", seq_len=1024)
    for pp in (2, 4, 8):
        chunks = model_chunks(model, pp, nanotron_blocks(model, pp))
        assert [layer for chunk in chunks for layer in chunk] == list(model.layers)
        assert chunks[0][0].kind == "embedding" and chunks[-1][-1].name == "lm_head"


def test_the_head_s_cost_pushes_blocks_towards_the_first_stage():
    # nanotron's README sweep, 1.34B (16 layers, h 2048, ffn 8192, vocab 131072): lm_head costs 4 layers,
    # so half of the 20 layer-costs falls exactly after layer 10. The sweep's log of rank 0's local
    # parameters (940M = embedding 268.4M + 10 x 67.1M) says that layer closes the first stage.
    assert nanotron_blocks_per_stage([4] * 16, 16, 2) == [10, 6]
    # A head a little dearer moves the boundary past layer 10: the layer that crosses it stays.
    assert nanotron_blocks_per_stage([4] * 16, 17, 2) == [11, 5]


def test_a_block_landing_on_a_stage_boundary_closes_that_stage():
    # 16 equal layers on 4 stages, a head of no cost: boundaries after layers 4, 8 and 12.
    assert nanotron_blocks_per_stage([1] * 16, 0, 4) == [4, 4, 4, 4]
    # The sweep's 1.34B on 4 stages: rank 0 logs 604M = embedding + 5 layers (the boundary, 5 layer-costs).
    assert nanotron_blocks_per_stage([4] * 16, 16, 4)[0] == 5


def test_the_first_stage_never_holds_fewer_blocks_than_an_even_split():
    model = get_model("llama3-8b", seq_len=1024)
    for pp in (2, 4, 8):
        blocks = list(nanotron_blocks(model, pp))
        even = [sum(1 for layer in c if layer.kind == "transformer_block") for c in model_chunks(model, pp)]
        assert sum(blocks) == sum(even) == model.num_layers
        assert blocks[0] >= even[0]


def test_a_stage_left_without_blocks_is_refused():
    model = get_model("llama3-8b", seq_len=1024)
    with pytest.raises(InputError):
        nanotron_blocks(model, model.num_layers)
