"""DeepSeek-V3's multi-token-prediction module (zoo `deepseek-v3-mtp`): after the head, on the last
pipeline chunk, outside the decoder's block count."""

import pytest

from scalesim.errors import InputError
from scalesim.models.moe import is_mtp
from scalesim.models.zoo import get_model
from scalesim.parallel.stages import layout_blocks, model_chunks, pipeline_blocks


@pytest.fixture(scope="module")
def models():
    return get_model("deepseek-v3", seq_len=512), get_model("deepseek-v3-mtp", seq_len=512)


def test_the_mtp_module_is_one_more_moe_block_sharing_the_heads_weights(models):
    plain, mtp = models
    extra = [layer for layer in mtp.layers if is_mtp(layer)]
    assert mtp.layers[:len(plain.layers)] == plain.layers                 # the model itself unchanged
    blocks = [layer for layer in extra if layer.kind == "transformer_block"]
    assert len(blocks) == 1 and blocks[0].expert_params > 0                # an MoE block (DeepSeek-V3 sec. 2.2)
    assert next(layer for layer in extra if layer.kind == "head").params == 0      # the shared output head
    assert any(op.name == "mtp_eh_proj" for layer in extra for op in layer.ops)    # the 2h -> h projection
    # a second loss: more work per token than the model without it
    assert mtp.model_flop_per_sample > plain.model_flop_per_sample


def test_the_mtp_module_runs_on_the_last_chunk_and_the_split_counts_decoder_blocks_only(models):
    plain, mtp = models
    a, b = model_chunks(plain, 4), model_chunks(mtp, 4)
    assert a[:-1] == b[:-1]
    assert b[-1][:len(a[-1])] == a[-1] and all(is_mtp(layer) for layer in b[-1][len(a[-1]):])
    assert pipeline_blocks(mtp, 2, 1, layout="Et*30|t*31L") == (30, 31)
    assert pipeline_blocks(mtp, 2, 1, layout="Et*30|t*31mL") == (30, 31)


def test_a_layout_may_place_m_only_before_the_loss_on_the_last_chunk():
    assert layout_blocks("Ettt|tmL", 4, 2, mtp=1) == (3, 1)
    for bad in ("Ettmt|tL", "Ettt|tmmL", "Ettt|m|L"):
        with pytest.raises(InputError, match="multi-token-prediction"):
            layout_blocks(bad, 4, 2 if bad.count("|") == 1 else 3, mtp=1)
    with pytest.raises(InputError, match="multi-token-prediction"):
        layout_blocks("Ettt|tmL", 4, 2)                      # a model without MTP
