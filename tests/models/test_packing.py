"""Packed BERT rows (block-diagonal attention) and the masked-only MLM head (MLPerf BERT)."""

import pytest

from scalesim.costs.compute import layer_time
from scalesim.hardware import get_gpu
from scalesim.models.packing import masked_lm_head, packed_attention
from scalesim.models.zoo import get_model

BERT = get_model("bert-large", seq_len=512)


def test_packing_divides_only_the_attention_core():
    packed = packed_attention(BERT, 2)
    for before, after in zip(BERT.layers, packed.layers):
        for a, b in zip(before.ops, after.ops):
            if a.kind == "attention":
                assert b.flop == pytest.approx(a.flop / 2) and b.score_elements == pytest.approx(a.score_elements / 2)
            else:
                assert a == b
    assert packed.params == BERT.params and packed.model_flop_per_sample == BERT.model_flop_per_sample


def test_more_sequences_per_row_is_never_slower():
    gpu = get_gpu("h100-sxm")
    block = [packed_attention(BERT, k).layers[1] for k in (1, 2, 4)]
    times = [layer_time(b, gpu, "fp16", 8, attention="naive") for b in block]
    assert times[0].forward_s > times[1].forward_s > times[2].forward_s
    assert packed_attention(BERT, 1) is BERT


def test_masked_head_does_the_head_work_of_its_positions_only():
    head = BERT.layers[-1]
    masked = masked_lm_head(BERT, 76).layers[-1]
    decoder = {op.name: op for op in head.ops}["mlm_decoder"]
    masked_decoder = {op.name: op for op in masked.ops}["mlm_decoder"]
    assert masked_decoder.flop == pytest.approx(decoder.flop * 76 / 512)
    assert masked.params == head.params and masked.activation_bytes < head.activation_bytes
    assert masked_lm_head(BERT, 512).layers[-1] == head          # every position: the plain head


def test_masked_head_needs_bert_and_a_position_count_within_the_sequence():
    with pytest.raises(ValueError):
        masked_lm_head(get_model("gpt2-124m", seq_len=512), 76)
    with pytest.raises(ValueError):
        masked_lm_head(BERT, 513)
    with pytest.raises(ValueError):
        packed_attention(BERT, 0)


@pytest.mark.parametrize("packed, refused", [(2048, True), (2**62, True), (512, False)])
def test_more_packed_sequences_than_tokens_in_a_row_exit_2_naming_the_key(tmp_path, packed, refused):
    """fuzz15: 2^62 sequences packed into a 512-token row ran at exit 0 (attention divided by 2^62)."""
    import yaml
    from click.testing import CliRunner

    from scalesim.cli import main

    path = tmp_path / "bert.yaml"
    path.write_text(yaml.safe_dump({
        "name": "packed bert", "cluster": {"node": "dgx-h100", "gpus": 1}, "model": "bert-large",
        "training": {"precision": "bf16", "seq_len": 512, "global_batch": 8, "micro_batch": 8,
                     "packed_sequences": packed}}))
    result = CliRunner().invoke(main, ["run", str(path), "--json", "--no-plots", "--no-scaling"])
    assert "Traceback" not in result.output
    if refused:
        assert result.exit_code == 2 and "training.packed_sequences" in result.output and str(path) in result.output
    else:
        assert result.exit_code == 0, result.output
