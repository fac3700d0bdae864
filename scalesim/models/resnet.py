"""ResNet-50/101/152 (He et al. 2015, Table 1) with bottleneck blocks, as torchvision builds them.

torchvision's "ResNet v1.5" puts the stride of a downsampling block on its 3x3
conv (the paper put it on the first 1x1), which changes FLOPs, not parameters.
Convs have no bias; every conv is followed by BatchNorm (weight and bias are
parameters, running statistics are buffers, not counted). One LayerSpec per
residual block, plus the stem and the classifier: 18 layers for ResNet-50, 52
for ResNet-152.

Convs are lowered to implicit GEMM: m = output pixels, n = output channels,
k = in_channels * kh * kw; forward FLOP 2*m*n*k.

>>> build_resnet(50).params      # torchvision resnet50
25557032
>>> build_resnet(152).params     # torchvision resnet152
60192808
"""

from __future__ import annotations

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec
from scalesim.models.transformer import elementwise_op, gemm_op, norm_op

BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}   # He et al. 2015, Table 1
WIDTHS = (64, 128, 256, 512)     # bottleneck widths of stages conv2_x..conv5_x
EXPANSION = 4                    # bottleneck output = 4 x width
BYTES = 2                        # 16-bit activations


def conv_op(name: str, cin: int, cout: int, kernel: int, stride: int, size_in: int) -> tuple[OpSpec, int]:
    """A square conv with padding kernel//2 on a size_in x size_in map; returns (op, size_out).

    >>> op, out = conv_op("conv1", 3, 64, 7, 2, 224)
    >>> out, op.gemm_mnk
    (112, (12544, 64, 147))
    """
    size_out = (size_in + 2 * (kernel // 2) - kernel) // stride + 1
    m, n, k = size_out * size_out, cout, cin * kernel * kernel
    moved = cin * size_in * size_in + k * n + m * n          # input, weights, output
    return OpSpec(name, "conv", 2.0 * m * n * k, float(moved), (m, n, k)), size_out


def _bn(name: str, channels: int, size: int) -> OpSpec:
    return norm_op(name, channels * size * size, channels, "batchnorm")


def _relu(name: str, n: int) -> OpSpec:
    return elementwise_op(name, n)


def bottleneck(name: str, cin: int, width: int, stride: int, size_in: int) -> tuple[LayerSpec, int]:
    """1x1 reduce, 3x3 (strided), 1x1 expand, with a 1x1 projection shortcut when the
    shape changes. Returns the block and its output map size.

    Activations stored (16-bit): each conv's output (the BatchNorm input) and each
    ReLU's output (the next conv's input; in-place ReLU shares it), i.e. conv1,
    relu1, conv2, relu2, conv3, [shortcut conv] and the block output. The block
    input is counted as the previous layer's output.
    """
    cout = width * EXPANSION
    c1, s1 = conv_op("conv1", cin, width, 1, 1, size_in)
    c2, s2 = conv_op("conv2", width, width, 3, stride, s1)
    c3, s3 = conv_op("conv3", width, cout, 1, 1, s2)
    a1, a2, a3 = width * s1 * s1, width * s2 * s2, cout * s3 * s3
    ops = [c1, _bn("bn1", width, s1), _relu("relu1", a1),
           c2, _bn("bn2", width, s2), _relu("relu2", a2),
           c3, _bn("bn3", cout, s3)]
    params = cin * width + 9 * width * width + width * cout + 2 * (width + width + cout)
    stored = 2 * a1 + 2 * a2 + a3 + a3                        # conv+relu outputs, conv3, block out
    if stride != 1 or cin != cout:
        cd, _ = conv_op("downsample", cin, cout, 1, stride, size_in)
        ops += [cd, _bn("bn_downsample", cout, s3)]
        params += cin * cout + 2 * cout
        stored += a3
    ops += [elementwise_op("residual", a3, inputs=2), _relu("relu3", a3)]
    return LayerSpec(name, "conv_block", params, tuple(ops), activation_bytes=float(BYTES * stored)), s3


def build_resnet(depth: int, *, image_size: int = 224, num_classes: int = 1000,
                 source: tuple[str, ...] = ()) -> ModelSpec:
    """ResNet-`depth` (50, 101 or 152) for one image_size x image_size RGB image.

    A vision model: tokens_per_sample is None; model FLOP per sample are 3x the
    forward FLOP (backward = 2x forward).
    """
    if depth not in BLOCKS:
        raise ValueError(f"ResNet depth must be one of {sorted(BLOCKS)}, not {depth}")
    conv1, size = conv_op("conv1", 3, 64, 7, 2, image_size)
    pooled = (size + 2 - 3) // 2 + 1                          # 3x3 max pool, stride 2, pad 1
    stem_ops = (conv1, _bn("bn1", 64, size), _relu("relu", 64 * size * size),
                OpSpec("maxpool", "pool", 9.0 * 64 * pooled ** 2, float(64 * size ** 2 + 64 * pooled ** 2)))
    # Stored: image (conv1 input), conv1 output (BN input), ReLU output (pool input), pool output.
    # The pool's int64 argmax indices are not counted.
    stem_act = BYTES * (3 * image_size ** 2 + 2 * 64 * size ** 2 + 64 * pooled ** 2)
    layers = [LayerSpec("stem", "stem", 3 * 64 * 49 + 2 * 64, stem_ops, activation_bytes=float(stem_act))]

    cin, size = 64, pooled
    for stage, (count, width) in enumerate(zip(BLOCKS[depth], WIDTHS), start=2):
        for i in range(count):
            stride = 2 if (i == 0 and stage > 2) else 1
            block, size = bottleneck(f"conv{stage}_{i + 1}", cin, width, stride, size)
            layers.append(block)
            cin = width * EXPANSION

    fc = (OpSpec("avgpool", "pool", float(cin * size * size), float(cin * size * size + cin)),
          gemm_op("fc", 1, num_classes, cin, bias=True))
    layers.append(LayerSpec("classifier", "classifier", cin * num_classes + num_classes, fc,
                            activation_bytes=float(BYTES * cin)))            # fc input
    forward = sum(layer.forward_flop for layer in layers)
    return ModelSpec(name=f"resnet{depth}", family="resnet", layers=tuple(layers), tokens_per_sample=None,
                     model_flop_per_sample=3.0 * forward, num_layers=sum(BLOCKS[depth]),
                     source=tuple(source))
