"""A tied output head under pipeline parallelism: the last stage keeps its own embedding copy."""

import pytest

from scalesim.costs.memory import with_tied_head_copy
from scalesim.models.transformer import lm_head, token_embedding
from scalesim.parallel.sharding import shard_layer


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_last_stage_holds_as_many_head_weights_tied_or_not(tp):
    s, h, vocab = 16, 32, 1000
    tied = with_tied_head_copy((shard_layer(lm_head(s, h, vocab, tied=True), tp, 1, False),), vocab, h, tp)
    untied = shard_layer(lm_head(s, h, vocab, tied=False), tp, 1, False)
    assert tied[0].params == untied.params


def test_a_stage_with_the_embedding_shares_it_with_the_head():
    s, h, vocab = 16, 32, 1000
    layers = (token_embedding(s, h, vocab, max_positions=None), lm_head(s, h, vocab, tied=True))
    assert sum(layer.params for layer in with_tied_head_copy(layers, vocab, h)) == vocab * h
