"""nanotron's Llama block and loss as its code runs them (costs/nanotron_kernels.py)."""

import pytest

from scalesim.costs.compute import ELEMENT_BYTES, layer_time, streaming_bw_bytes_per_s
from scalesim.costs.loss_memory import loss_peak_bytes
from scalesim.costs.nanotron_kernels import LAYOUT_NAME, LOSS_PASS_NAME, nanotron_loss_model, nanotron_model
from scalesim.hardware import get_gpu
from scalesim.models.spec import LayerSpec, ModelSpec
from scalesim.models.transformer import lm_head, transformer_block
from scalesim.parallel.sharding import shard_layer

S, H, F, V = 4096, 2048, 8192, 131072


def block(kv_heads=32):
    return transformer_block("b", s=S, h=H, heads=32, kv_heads=kv_heads, f=F, ffn="swiglu", bias=False,
                             norm="rmsnorm", rotary=True)


def model_of(*layers):
    return ModelSpec("m", "inline", tuple(layers), S, 0.0)


def moved_bytes(layer, name):
    """(forward, backward) bytes the ops called `name` move per sample, 16-bit."""
    ops = [op for op in layer.ops if op.name == name]
    forward = sum(op.elements_moved for op in ops) * 2
    backward = sum(2 * op.elements_moved if op.backward_elements is None else op.backward_elements
                   for op in ops) * 2
    return forward, backward


def test_swiglu_moves_what_split_silu_and_mul_and_their_autograd_move():
    # forward silu 4 + product 6 = 10 B per output element; backward two products 12, silu 6, cat 8 = 26
    fused = moved_bytes(block(), "swiglu")
    eager = moved_bytes(nanotron_model(model_of(block()), "bf16").layers[0], "swiglu")
    assert fused == pytest.approx((6 * S * F, 12 * S * F))
    assert eager == pytest.approx((10 * S * F, 26 * S * F))


def test_layout_copies_without_gqa_are_fourteen_then_sixteen_sh_elements_and_shrink_with_gqa():
    full = moved_bytes(nanotron_model(model_of(block()), "bf16").layers[0], LAYOUT_NAME)
    assert full == pytest.approx((2 * 14 * S * H, 2 * 16 * S * H))
    grouped = moved_bytes(nanotron_model(model_of(block(kv_heads=8)), "bf16").layers[0], LAYOUT_NAME)
    assert grouped[0] < full[0] and grouped[1] < full[1]


def test_fp32_loss_moves_38_bytes_a_logit_forward_and_14_backward_and_keeps_its_memory_count():
    head = lm_head(S, H, V, tied=True)
    timed = nanotron_loss_model(model_of(head)).layers[0]
    loss = [op for op in timed.ops if op.name in ("cross_entropy", LOSS_PASS_NAME)]
    assert len(loss) == 6
    forward = sum(op.elements_moved for op in loss) * 2
    backward = sum(op.backward_elements for op in loss) * 2
    assert forward == pytest.approx(38 * S * V) and backward == pytest.approx(14 * S * V)
    assert loss_peak_bytes([timed], 2, "fp32-upcast") == loss_peak_bytes([head], 2, "fp32-upcast")


def test_the_loss_backward_runs_at_its_own_bytes_not_twice_the_forward():
    gpu = get_gpu("h100-sxm")
    timed = nanotron_loss_model(model_of(lm_head(S, H, V, tied=True))).layers[0]
    passes = LayerSpec("loss", "head", 0, tuple(op for op in timed.ops if op.gemm_mnk is None), 0.0)
    t = layer_time(passes, gpu, "bf16", 1)
    stream = streaming_bw_bytes_per_s(gpu)
    assert t.backward_s < t.forward_s                         # 14 bytes a logit against 38
    assert t.backward_s >= 14 * S * V / stream
    assert t.forward_s >= 38 * S * V * ELEMENT_BYTES["bf16"] / 2 / stream


def test_tensor_parallelism_splits_the_copies_and_the_loss_passes_forward_and_backward():
    nano = nanotron_loss_model(nanotron_model(model_of(block(), lm_head(S, H, V, tied=True)), "bf16"))
    for layer, name in ((nano.layers[0], LAYOUT_NAME), (nano.layers[0], "swiglu"), (nano.layers[1], LOSS_PASS_NAME)):
        whole, split = moved_bytes(layer, name), moved_bytes(shard_layer(layer, 4, 1, True), name)
        assert split == pytest.approx((whole[0] / 4, whole[1] / 4))


def test_nanotrons_block_is_slower_than_the_fused_one_and_gemms_are_untouched():
    gpu = get_gpu("h100-sxm")
    fused = layer_time(block(), gpu, "bf16", 1)
    nano = layer_time(nanotron_model(model_of(block()), "bf16").layers[0], gpu, "bf16", 1)
    assert nano.forward_s > fused.forward_s and nano.backward_s > fused.backward_s
    assert nano.matmul_forward_s == pytest.approx(fused.matmul_forward_s)
    assert nanotron_model(model_of(block()), "fp32").layers[0] == block()


def test_nanotron_scenarios_run_their_block_and_loss_kernels():
    from scalesim.app.setup import prepare
    from scalesim.app.validate import cases_file
    from scalesim.scenario import load_scenario

    scenario, file = load_scenario(cases_file().parent / "scenarios" / "nanotron-1.34b-1node-dp4-tp1-pp2.yaml")
    names = {op.name for layer in prepare(scenario, file).model.layers for op in layer.ops}
    assert {LAYOUT_NAME, LOSS_PASS_NAME} <= names
