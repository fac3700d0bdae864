"""Fused BatchNorm/ReLU/add kernels in ResNet (NVIDIA's MLPerf MXNet ResNets): less memory traffic, same math."""

import pytest

from scalesim.costs.compute import layer_time
from scalesim.hardware import get_gpu
from scalesim.models.conv_fusion import CONV_FUSIONS, fuse_resnet
from scalesim.models.resnet import build_resnet

PLAIN = build_resnet(50)


def _memory_bound_elements(model):
    return sum(op.elements_moved for layer in model.layers for op in layer.ops if op.kind in ("norm", "elementwise"))


def _step_s(model, gpu):
    times = [layer_time(layer, gpu, "fp16", 256) for layer in model.layers]
    return sum(t.forward_s + t.backward_s for t in times)


def test_fusing_keeps_parameters_convs_and_activation_memory():
    for fusion in CONV_FUSIONS:
        fused = fuse_resnet(PLAIN, fusion)
        assert fused.params == PLAIN.params
        convs = [op for layer in fused.layers for op in layer.ops if op.kind == "conv"]
        assert convs == [op for layer in PLAIN.layers for op in layer.ops if op.kind == "conv"]
        assert [l.activation_bytes for l in fused.layers] == [l.activation_bytes for l in PLAIN.layers]


def test_more_fusion_moves_fewer_bytes_and_launches_fewer_kernels():
    none, bn_relu, normconv = (fuse_resnet(PLAIN, f) for f in ("none", "bn-relu", "normconv"))
    assert _memory_bound_elements(normconv) < _memory_bound_elements(bn_relu) < _memory_bound_elements(none)
    kernels = [sum(len(layer.ops) for layer in m.layers) for m in (none, bn_relu, normconv)]
    assert kernels[2] < kernels[1] < kernels[0]


@pytest.mark.parametrize("gpu", ["h100-sxm", "l40s", "a100-80gb-sxm"])
def test_fused_is_never_slower(gpu):
    spec = get_gpu(gpu)
    times = [_step_s(fuse_resnet(PLAIN, f), spec) for f in ("none", "bn-relu", "normconv")]
    assert times[2] < times[1] < times[0]


def test_normconv_leaves_one_add_relu_pass_per_block():
    fused = fuse_resnet(PLAIN, "normconv")
    for layer in fused.layers:
        if layer.kind == "conv_block":
            assert [op.kind for op in layer.ops if op.kind != "conv"] == ["elementwise"]


def test_other_models_and_unknown_fusions():
    from scalesim.models.zoo import get_model
    bert = get_model("bert-base", seq_len=128)
    assert fuse_resnet(bert, "normconv") is bert
    with pytest.raises(ValueError):
        fuse_resnet(PLAIN, "everything")
