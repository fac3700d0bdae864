"""Separate projections on one input: q, k and v (and gate and up) as linears of their own.

Megatron-Core and Transformer Engine run a block's q, k and v projections as one fused GEMM
(linear_qkv) and its gate and up projections as one (linear_fc1); scalesim's block models that
(models/transformer.py: one `qkv` op, and `mlp_gate` / `mlp_up` with no gradient sum between them).
torchtitan's Llama runs them as separate nn.Linear modules on the same input
(torchtitan/models/llama3/model.py at 820504e and e7c0cae, models/llama/model.py at 9dec370:
`xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)` and `self.w2(F.silu(self.w1(x)) * self.w3(x))`;
its tensor-parallel plan makes each its own ColwiseParallel, parallelize_llama.py apply_tp). Two
costs follow, each priced by the existing cost functions:

- the GEMMs by their own shapes (`gemm_parts`): q, k and v are three GEMMs reading the same input,
  and wk and wv are thin (N = kv_heads x head_dim / tp: 128 for Llama 3 8B at TP 8), so their
  data gradients (depth N, writing the whole tokens x hidden input gradient each) run memory-bound
  (compute.py op_time_s and gemm_depth.backward_gemms, per part);
- autograd sums the data gradients the separate GEMMs compute for their shared input
  (`grad_sum_op`): torch.autograd's InputBuffer adds each arriving gradient into the one buffered
  (torch/csrc/autograd/input_buffer.cpp, accumulate: one add, read 2 and write 1, per gradient
  after the first); under torch.compile AOTAutograd traces these adds into the backward graph and
  Inductor fuses them into one pointwise kernel reading every gradient and writing their sum
  (parts + 1 passes). The sum is over the whole gathered input under sequence parallelism (the
  ColwiseParallel inputs are Replicate; the reduce-scatter follows the sum), so tensor parallelism
  does not split it (parallel/sharding.py TP_WHOLE).
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

# Gradient sums, by the fused op whose input they sum to (whole on each TP rank: parallel/sharding.py).
GRAD_SUMS = {"qkv": "grad_sum_qkv", "mlp_up": "grad_sum_mlp"}
GRAD_SUM_OPS = tuple(GRAD_SUMS.values())


def gemm_parts(op: OpSpec) -> tuple[OpSpec, ...]:
    """`op` as the GEMMs it runs: one per entry of `op.parts` (column widths, in proportion to its n,
    so tensor parallelism's split carries over), each reading the whole input; the first does any
    FP8 cast of it (its siblings read the same cast tensor); (op,) when it is one GEMM.

    >>> op = OpSpec("qkv", "gemm", 2.0 * 8 * 96 * 64, 8 * 64 + 64 * 96 + 8 * 96, (8, 96, 64), parts=(64, 16, 16))
    >>> [p.gemm_mnk for p in gemm_parts(op)], sum(p.flop for p in gemm_parts(op)) == op.flop
    ([(8, 64, 64), (8, 16, 64), (8, 16, 64)], True)
    """
    if not op.parts or op.gemm_mnk is None:
        return (op,)
    m, n, k = op.gemm_mnk
    total = sum(op.parts)
    widths = [max(1, round(n * p / total)) for p in op.parts]
    extra = op.elements_moved - (m * k + k * n + m * n)        # a bias, split with the columns
    return tuple(replace(op, parts=(), gemm_mnk=(m, w, k), flop=op.flop * w / n,
                         elements_moved=float(m * k + k * w + m * w + extra * w / n),
                         cast_share=op.cast_share if i == 0 else 0.0)
                 for i, w in enumerate(widths))


def grad_sum_op(name: str, tokens: int, width: int, gradients: int, fused: bool) -> OpSpec:
    """The backward kernel(s) summing `gradients` data gradients of `tokens` x `width` elements:
    one fused kernel reading each and writing the sum (torch.compile), or gradients - 1 adds of
    3 passes each (eager autograd).

    >>> grad_sum_op("g", 4, 8, 3, fused=True).elements_moved, grad_sum_op("g", 4, 8, 3, fused=False).elements_moved
    (128.0, 192.0)
    """
    passes = gradients + 1 if fused else 3 * (gradients - 1)
    return OpSpec(name, "elementwise", float((gradients - 1) * tokens * width), float(passes * tokens * width),
                  backward_only=True)


def _separate(layer: LayerSpec, fused_sum: bool) -> LayerSpec:
    ops = {op.name: op for op in layer.ops if op.gemm_mnk is not None}
    qkv, attn_out = ops.get("qkv"), ops.get("attn_out")
    if layer.kind != "transformer_block" or qkv is None or attn_out is None:
        return layer
    m, n, k = qkv.gemm_mnk
    q = attn_out.gemm_mnk[2]                       # heads x head_dim: the attention output's width
    if not 0 < q < n:
        return layer
    kv = (n - q) // 2
    out = []
    for op in layer.ops:
        if op is qkv:
            out += [replace(op, parts=(q, kv, kv)), grad_sum_op(GRAD_SUMS["qkv"], m, k, 3, fused_sum)]
        elif op.name == "mlp_up" and "mlp_gate" in ops and op.gemm_mnk is not None:    # w1 and w3
            out += [op, grad_sum_op(GRAD_SUMS["mlp_up"], op.gemm_mnk[0], op.gemm_mnk[2], 2, fused_sum)]
        else:
            out.append(op)
    return replace(layer, ops=tuple(out))


def with_separate_projections(model: ModelSpec, fused: bool, elementwise_kernels: str) -> ModelSpec:
    """`model` with its dense blocks' q, k, v (and gate, up) as separate GEMMs on one input when
    `fused` is False (training.fused_projections); their gradient sums fused into one kernel each
    unless the elementwise kernels run eager. `model` itself when it has no such block."""
    if fused:
        return model
    fused_sum = elementwise_kernels != "eager"
    layers = tuple(_separate(layer, fused_sum) for layer in model.layers)
    return model if all(a is b for a, b in zip(layers, model.layers)) else replace(model, layers=layers)
