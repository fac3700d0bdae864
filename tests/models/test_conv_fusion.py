"""Fused BatchNorm/ReLU/add kernels in ResNet (NVIDIA's MLPerf MXNet ResNets): less memory traffic, same math."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import layer_time
from scalesim.hardware import get_gpu
from scalesim.models.conv_fusion import CONV_FUSIONS, fuse_resnet
from scalesim.models.resnet import build_resnet

PLAIN = build_resnet(50)


def _memory_bound_elements(model):
    """Elements the forward's memory-bound kernels move."""
    return sum(op.elements_moved for layer in model.layers for op in layer.ops
               if op.kind in ("norm", "elementwise") and not op.backward_only)


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
    kernels = [sum(1 for layer in m.layers for op in layer.ops if not op.backward_only) for m in (none, bn_relu, normconv)]
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
            assert [op.kind for op in layer.ops if op.kind != "conv" and not op.backward_only] == ["elementwise"]


def test_normconv_still_runs_the_backward_of_the_batchnorms_it_folds_into_convs():
    """BatchNorm's backward needs batch-wide sums of the output gradient before it can form the
    input gradient, so the BN folded into the next conv's prologue keeps a backward pass: read
    the gradient and the saved conv output, write the input gradient (3 elements per element)."""
    plain_blocks = [layer for layer in PLAIN.layers if layer.kind == "conv_block"]
    fused_blocks = [layer for layer in fuse_resnet(PLAIN, "normconv").layers if layer.kind == "conv_block"]
    gpu = get_gpu("h100-sxm")
    for plain, fused in zip(plain_blocks, fused_blocks):
        bns = {op.name: op for op in plain.ops if op.name in ("bn1", "bn2")}
        grads = [op for op in fused.ops if op.backward_only]
        assert sorted(op.name for op in grads) == ["bn1_backward", "bn2_backward"]
        for op in grads:
            assert op.elements_moved == pytest.approx(1.5 * bns[op.name[:3]].elements_moved)  # 3n, forward 2n
        with_grads = layer_time(fused, gpu, "fp16", 256)
        without = layer_time(replace(fused, ops=tuple(op for op in fused.ops if not op.backward_only)),
                             gpu, "fp16", 256)
        assert with_grads.forward_s == without.forward_s
        assert with_grads.backward_s > without.backward_s


def test_other_models_and_unknown_fusions():
    from scalesim.models.zoo import get_model
    bert = get_model("bert-base", seq_len=128)
    assert fuse_resnet(bert, "normconv") is bert
    with pytest.raises(ValueError):
        fuse_resnet(PLAIN, "everything")
