"""ResNet with BatchNorm, ReLU and the residual add fused into fewer kernels, as NVIDIA's MLPerf code runs it.

`build_resnet` times every BatchNorm, ReLU and residual add as its own memory-bound
pass, as eager PyTorch (torchvision) runs them. NVIDIA's MLPerf Training ResNet-50
(MXNet, mlcommons/training_results_v4.0 NVIDIA/benchmarks/resnet/implementations/*/
symbols/resnet-v1b-*.py, chosen by each config's NETWORK=) fuses them:

- "bn-relu" (resnet-v1b-fl / -mod-fl / -stats-fl, `fuse_bn_relu` and `fuse_bn_add_relu`):
  each BatchNorm applies its ReLU (`mx.sym.BatchNorm(..., act_type='relu')`) and the
  block's last BatchNorm also adds the shortcut and applies the ReLU
  (`mx.sym.BatchNormAddRelu(data=conv3, addend=shortcut)`). The separate ReLU and
  residual-add passes vanish; that last BatchNorm reads the shortcut as well.
- "normconv" (resnet-v1b-normconv-fl / -dbar-fl; MXNet's NormConvolution, BNStatsFinalize
  and ScaleBiasAddRelu operators, MXNET_CUDNN_SUPPLY_NORMCONV_CONSTANTS=1 in the configs):
  each convolution computes its output's BatchNorm statistics (per-channel sum and sum
  of squares) in its epilogue and applies the previous BatchNorm's scale, bias and ReLU
  to its input in its prologue, so bn1, bn2 and their ReLUs cost no pass of their own;
  the block ends with one dual scale-bias-add-ReLU kernel (`ScaleBiasAddRelu(...,
  dual_scale_bias=True, fused_add=True)`) that reads conv3's output and the shortcut
  (the projection conv's output, or the block input) and writes the block output.
  The stem keeps one BatchNorm-with-ReLU pass (its max pool is not a conv).

BNStatsFinalize works on per-channel vectors (negligible) and is not counted.
Activation memory is left as `build_resnet` counts it (the fused kernels still save the
conv outputs backward needs). Backward: each fused kernel has a fused backward, priced
like any memory-bound op (twice its forward bytes, scalesim/costs/compute.py).

The fusion is forward-only for bn1 and bn2: BatchNorm's input gradient needs the batch-wide
sums of the output gradient and of its product with the normalised input (Ioffe & Szegedy
2015, sec. 3), which exist only after the next conv's data-gradient pass has written that
gradient, so no conv epilogue or prologue can produce it. cuDNN's fused-op set for this
ResNet unit has a separate memory-bound kernel for it, CUDNN_FUSED_DACTIVATION_FORK_DBATCHNORM
(cudnnFusedOps_t, cuDNN 8 API), and the same unit ported to PaddlePaddle by NVIDIA
(paddle/fluid/operators/fused/resnet_unit_op.cu, ResNetUnitGradKernel) runs it before each
conv's backward. So normconv keeps bn1's and bn2's backward as `backward_only` ops (read the
gradient and the saved conv output, write the input gradient).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

CONV_FUSIONS = ("none", "bn-relu", "normconv")
_RELUS = ("relu", "relu1", "relu2", "relu3", "residual")


def _block_out_elements(layer: LayerSpec) -> float:
    """Output elements of a bottleneck (the residual add's n: it reads 2n and writes n)."""
    residual = next(op for op in layer.ops if op.name == "residual")
    return residual.elements_moved / 3


def _fused_block_ops(layer: LayerSpec, fusion: str) -> tuple[OpSpec, ...]:
    n = _block_out_elements(layer)
    if fusion == "bn-relu":
        ops = []
        for op in layer.ops:
            if op.name in _RELUS:
                continue
            if op.name == "bn3":                    # BatchNormAddRelu also reads the shortcut
                op = replace(op, name="bn3_add_relu", elements_moved=op.elements_moved + n)
            ops.append(op)
        return tuple(ops)
    kept = [op for op in layer.ops if op.kind not in ("norm", "elementwise")]
    bns = [op for op in layer.ops if op.name in ("bn3", "bn_downsample")]
    flop = sum(op.flop for op in bns)
    # bn1 and bn2 (the BatchNorms NormConvolution folds into conv2's and conv3's prologue) still
    # pay their backward pass: read the output gradient and the saved conv output, write the input
    # gradient, 3/2 of the forward's read and write. Memory-bound; its FLOP are not counted.
    grads = [replace(op, name=f"{op.name}_backward", flop=0.0, elements_moved=1.5 * op.elements_moved,
                     backward_only=True) for op in layer.ops if op.name in ("bn1", "bn2")]
    # Reads conv3's output and the shortcut, writes the block output; per-channel weights are negligible.
    return (*kept, *grads, OpSpec("scale_bias_add_relu", "elementwise", flop, 3.0 * n))


def _fused_stem_ops(layer: LayerSpec) -> tuple[OpSpec, ...]:
    return tuple(op for op in layer.ops if op.name != "relu")     # BatchNorm with act_type='relu'


def fuse_resnet(model: ModelSpec, fusion: str) -> ModelSpec:
    """`model` (a `build_resnet` model) with its BatchNorm/ReLU/add passes fused as `fusion` says.

    >>> from scalesim.models.resnet import build_resnet
    >>> plain = build_resnet(50)
    >>> fused = fuse_resnet(plain, "normconv")
    >>> fused.params == plain.params, len(fused.layers) == len(plain.layers)
    (True, True)
    >>> sum(len(l.ops) for l in fused.layers) < sum(len(l.ops) for l in plain.layers)
    True
    """
    if fusion not in CONV_FUSIONS:
        raise ValueError(f"conv fusion must be one of {CONV_FUSIONS}, not {fusion!r}")
    if fusion == "none" or model.family != "resnet":
        return model
    layers = []
    for layer in model.layers:
        if layer.kind == "conv_block":
            layer = replace(layer, ops=_fused_block_ops(layer, fusion))
        elif layer.kind == "stem":
            layer = replace(layer, ops=_fused_stem_ops(layer))
        layers.append(layer)
    return replace(model, layers=tuple(layers))
