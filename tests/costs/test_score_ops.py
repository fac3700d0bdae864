"""Eager attention's kernels on the materialised scores, per model family (costs/score_ops.py)."""

import pytest

from scalesim.costs.compute import (KERNEL_OVERHEAD_S, attention_time_s, layer_time,
                                    streaming_bw_bytes_per_s)
from scalesim.costs.score_ops import SCORE_OP_COSTS, SCORE_PASSES, score_passes
from scalesim.errors import InputError
from scalesim.hardware import get_gpu
from scalesim.models.zoo import get_model

OPT_OPS = ["mask_add", "clamp", "softmax"]            # Hugging Face OPTAttention at attention_dropout 0.0
SPEC = {"kind": "transformer", "layers": 2, "hidden": 2048, "heads": 32, "vocab": 50272, "ffn_hidden": 8192,
        "tied_embeddings": True}


def _attention(spec):
    model = get_model(spec, seq_len=2048)
    return next(op for op in model.layers[1].ops if op.kind == "attention")


def test_the_default_list_is_the_naive_sequence():
    # scale, mask, softmax, dropout between the two matmuls: the passes compute.py documents
    assert (score_passes(None)[0], score_passes(None, backward=True)[0]) == SCORE_PASSES["naive"]
    assert score_passes(("scale", "mask_add", "softmax", "dropout")) == score_passes(None)


def test_opt_runs_fewer_forward_passes_and_pays_the_clamp_backward():
    gpu = get_gpu("h100-sxm")
    gpt, opt = _attention(SPEC), _attention({**SPEC, "attention_score_ops": OPT_OPS})
    assert opt.score_ops == tuple(OPT_OPS) and gpt.score_ops is None
    # no score scaling (q is scaled in its projection) and no dropout kernel at p = 0
    assert attention_time_s(opt, gpu, "fp32", 1, "naive") < attention_time_s(gpt, gpu, "fp32", 1, "naive")
    # torch.maximum's backward (five kernels) costs more than the scale and dropout backwards it replaces
    assert (attention_time_s(opt, gpu, "fp32", 1, "naive", backward=True)
            > attention_time_s(gpt, gpu, "fp32", 1, "naive", backward=True))
    # the list belongs to eager attention: flash attention never materialises the scores
    assert attention_time_s(opt, gpu, "bf16", 1, "flash2") == attention_time_s(gpt, gpu, "bf16", 1, "flash2")


def test_only_the_attention_core_changes():
    gpu = get_gpu("h100-sxm")
    gpt = get_model(SPEC, seq_len=1024).layers[1]
    opt = get_model({**SPEC, "attention_score_ops": OPT_OPS}, seq_len=1024).layers[1]
    assert gpt.params == opt.params and gpt.forward_flop == opt.forward_flop
    a, b = layer_time(gpt, gpu, "fp32", 1, attention="naive"), layer_time(opt, gpu, "fp32", 1, attention="naive")
    assert a.matmul_forward_s != b.matmul_forward_s and a.forward_s - a.matmul_forward_s == pytest.approx(
        b.forward_s - b.matmul_forward_s)


@pytest.mark.parametrize("value", ["clamp", ["clamp", "relu"], [1]])
def test_bad_score_ops_name_the_key_and_the_allowed_kernels(value):
    with pytest.raises(InputError) as err:
        get_model({**SPEC, "attention_score_ops": value}, seq_len=128, file="s.yaml")
    assert err.value.key == "model.attention_score_ops" and err.value.file == "s.yaml"
    assert "mask_add" in str(err.value) and "dropout" in str(err.value)


def test_fused_attention_without_dropout_saves_the_dropout_passes_and_kernel():
    # Megatron's / Transformer Engine's fused softmax keeps its dropout kernel only where the model
    # has attention dropout; at p = 0 PyTorch launches none, forward or backward
    gpu = get_gpu("gb200")
    with_dropout, without = _attention(SPEC), _attention({**SPEC, "attention_score_ops": OPT_OPS})
    per_pass = with_dropout.score_elements * 2 / streaming_bw_bytes_per_s(gpu)
    dropout_fwd, dropout_bwd = SCORE_OP_COSTS["dropout"][:2]
    for backward, passes in ((False, dropout_fwd), (True, dropout_bwd)):
        saved = (attention_time_s(with_dropout, gpu, "bf16", 1, "fused", backward=backward)
                 - attention_time_s(without, gpu, "bf16", 1, "fused", backward=backward))
        assert saved == pytest.approx(passes * per_pass + KERNEL_OVERHEAD_S)
    # the clamp and the missing scale of OPT's eager code are not fused attention's kernels
    assert (attention_time_s(without, gpu, "bf16", 1, "fused")
            == attention_time_s(_attention({**SPEC, "attention_score_ops": ["softmax"]}), gpu, "bf16", 1, "fused"))


def test_deepseek_v3_attention_runs_no_dropout():
    # DeepSeek-V3 trains at attention dropout 0.0: no dropout kernel on its materialised scores
    for name in ("deepseek-v3", "deepseek-v3-mtp"):
        ops = {op.score_ops for layer in get_model(name, seq_len=4096).layers for op in layer.ops
               if op.kind == "attention"}
        assert ops and all("dropout" not in o and "softmax" in o for o in ops)
