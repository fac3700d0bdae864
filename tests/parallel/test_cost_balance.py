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
    # so the first of 2 stages takes the layers up to half of 20 layer-costs and the one that crosses it.
    assert nanotron_blocks_per_stage([4] * 16, 16, 2) == [11, 5]
    # The rank moves on only once its share is passed (a strict '>'): a block that lands exactly on the
    # boundary stays, even with a head that costs nothing.
    assert nanotron_blocks_per_stage([1] * 16, 0, 4) == [5, 4, 4, 3]


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
