"""The float8 casts of torchao's tensorwise dynamic scaling (torchtitan's `converters = ["float8"]`).

scalesim's default FP8 recipe is Transformer Engine's: each FP8 GEMM casts its 16-bit input in one
pass, reading 2 bytes and writing 1 an element, the scale taken from the amax history of earlier
steps (compute.py, `cast_share`), and backward pays that again. torchao's Float8Linear with dynamic
tensorwise scaling (torchao @6243040, June 2025, the version of torchtitan's June 2025 float8 runs)
does more, per linear, per micro-batch:

- it needs this very tensor's amax before it can cast (`tensor_to_amax`: torch.max(torch.abs(x))),
  then casts (read 2 bytes, write 1). torchao's own roofline model of this recipe
  (torchao/testing/float8/roofline_utils.py, get_tensor_memory_traffic_ovhd_s, "tensorwise")
  counts an amax pass that reads the tensor, a tiny second amax stage and the cast; for compiled
  code it assumes the amax is computed in the kernel that produces the tensor
  (benchmarks/float8/float8_roofline.py: "assume for float8 activations/gradients that
  torch.compile will fuse to the preceding op"), as is done here: the cast pass is what is left;
- the input (forward) and the gradient of the output (backward: matmul_with_hp_or_float8_args.backward,
  `hp_tensor_to_float8_dynamic(grad_output, ...)`) are both cast, where scalesim's Transformer
  Engine model charges the input's cast again in backward, at the input's size;
- `_scaled_mm` takes its first operand row-major and its second column-major (torchao/float8/
  float8_ops.py, preprocess_addmm: `a_data.contiguous()`, `b_data.t().contiguous().t()`), so
  the weight gradient (grad_output.t() @ input) needs both in the other layout. Where the cast
  tensor is used as it was cast, the cast's own pass writes that second layout too (the
  roofline's "write twice in float8 (row-major and col-major)"): 4 bytes an element. Where it
  was cast on a sequence-parallel shard and all-gathered in float8 (torchao's
  PrepareFloat8ModuleInput for the block inputs; Float8RowwiseParallel's output, whose gradient
  is cast by NoopFwToFloat8BwDynamic before the backward all-gather), the second layout is of the
  whole gathered tensor, written (1 byte an element, once per tensor: its sibling GEMMs read the
  same copy) by the pass that already copies the gathered tensor out of NCCL's buffer
  (torchtitan's batch-first layout: parallel/sp_layout.py).

So, per block (sizes per sample; the ops below shard with the tensors they touch: parallel/sharding.py
FLOAT8_SP_SPLIT, FLOAT8_HEAD_SPLIT, FLOAT8_WHOLE):

- the block input to q/k/v and to w1/w3: cast, 3 bytes an element of s x h, on the local sequence
  shard under sequence parallelism; its second layout, 1 byte of the whole s x h;
- the input of wo and w2 (split by heads / ffn columns): 3 bytes, and 1 for its second layout;
- the gradients of q, k, v, w1, w3 (split by columns): 4 bytes an element, backward;
- the gradients of wo and w2 (s x h, reduce-scattered in forward, all-gathered in backward): 3 bytes
  on the shard, 1 byte for the second layout of the whole.

Weights are cast too (the roofline's 8 bytes an element, forward and backward): a block's weights
are 1/M of its activations' elements for M tokens, under 0.5% of these casts at the tokens of a
training micro-batch, and are left out, as are the amax all-reduces over the tensor-parallel group
that a cast of a DTensor makes (about 18 one-element all-reduces per block and micro-batch).
Under per-op selective checkpointing the forward casts are recomputed (torchtitan saves `aten.max`).
Without the fused amax (the roofline's unfused default, 2 more bytes a cast) torchtitan's FSDP-only
Llama 3.1 8B float8 speed-up comes out 1.21x against the measured 1.28x (Dec 2024 runs); with it 1.25x.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.fp8_current_scaling import current_scaling_model
from scalesim.costs.fp8_grad_casts import mxfp8_model
from scalesim.costs.fp8_norm_fusion import norm_fused_model
from scalesim.models.spec import LayerSpec, ModelSpec, OpSpec

RECIPES = ("transformer-engine", "torchao-tensorwise", "transformer-engine-mxfp8", "transformer-engine-current")

# Bytes per element (the ops count elements at the training precision's 2 bytes: compute.py ELEMENT_BYTES).
CAST_BYTES = 2.0 + 1.0                  # cast read + write (amax: in the producing kernel)
FUSED_TWO_LAYOUT_BYTES = 2.0 + 2.0        # cast read + both layouts written
TRANSPOSE_BYTES = 1.0                   # the second layout, written in a pass that runs anyway
OP_BYTES = 2.0

# Op names by how tensor parallelism splits them (parallel/sharding.py imports these):
# on the sequence shard under sequence parallelism, else whole ...
FLOAT8_SP_SPLIT = ("fp8_cast_attn", "fp8_grad_attn", "fp8_cast_mlp", "fp8_grad_mlp")
# ... split by heads / ffn columns ...
FLOAT8_HEAD_SPLIT = ("fp8_cast_attn_heads", "fp8_grad_attn_heads", "fp8_cast_mlp_cols", "fp8_grad_mlp_cols")
# ... and whole on every rank (the all-gathered tensors).
FLOAT8_WHOLE = ("fp8_transpose_attn", "fp8_transpose_mlp")
FLOAT8_ATTENTION_HALF = ("fp8_cast_attn", "fp8_grad_attn", "fp8_cast_attn_heads", "fp8_grad_attn_heads",
                         "fp8_transpose_attn")


def _op(name: str, elements: float, bytes_per_element: float, *, backward_only: bool = False,
        backward_bytes: float = 0.0) -> OpSpec:
    return OpSpec(name, "elementwise", 0.0, elements * bytes_per_element / OP_BYTES, backward_only=backward_only,
                  backward_elements=None if backward_only else elements * backward_bytes / OP_BYTES)


def _gemm(ops: tuple[OpSpec, ...], name: str) -> OpSpec | None:
    return next((op for op in ops if op.name == name and op.gemm_mnk is not None), None)


def torchao_block_casts(layer: LayerSpec) -> LayerSpec:
    """A dense block's ops with torchao's casts as ops of their own and its GEMMs casting nothing
    themselves (`cast_share` 0); other layers as they are.

    >>> from scalesim.models.transformer import transformer_block
    >>> b = transformer_block("b", s=8, h=64, heads=4, kv_heads=1, f=128, ffn="swiglu", bias=False, norm="rmsnorm")
    >>> casts = {op.name: op.elements_moved for op in torchao_block_casts(b).ops if op.name.startswith("fp8_")}
    >>> casts["fp8_grad_mlp_cols"] == 2.0 * 8 * 2 * 128, casts["fp8_transpose_attn"] == 8 * 64
    (True, True)
    """
    qkv, attn_out = _gemm(layer.ops, "qkv"), _gemm(layer.ops, "attn_out")
    up, down = _gemm(layer.ops, "mlp_up"), _gemm(layer.ops, "mlp_down")
    if layer.kind != "transformer_block" or None in (qkv, attn_out, up, down):
        return layer
    s, h, f = qkv.gemm_mnk[0], qkv.gemm_mnk[2], down.gemm_mnk[2]
    columns = [g for g in layer.ops if g.name in ("mlp_gate", "mlp_up") and g.gemm_mnk is not None]
    first_column, last_column = columns[0], columns[-1]
    # Each cast where it runs: the inputs' before their GEMM (before the all-gather), the gradients'
    # after it (column GEMMs stay adjacent: parallel/tp_overlap.py cuts a half at them).
    before = {id(qkv): (_op("fp8_cast_attn", s * h, CAST_BYTES),),
              id(attn_out): (_op("fp8_cast_attn_heads", s * attn_out.gemm_mnk[2], CAST_BYTES,
                                 backward_bytes=TRANSPOSE_BYTES),),
              id(first_column): (_op("fp8_cast_mlp", s * h, CAST_BYTES),),
              id(down): (_op("fp8_cast_mlp_cols", s * f, CAST_BYTES, backward_bytes=TRANSPOSE_BYTES),)}
    after = {id(qkv): (_op("fp8_grad_attn_heads", s * qkv.gemm_mnk[1], FUSED_TWO_LAYOUT_BYTES, backward_only=True),),
             id(attn_out): (_op("fp8_grad_attn", s * h, CAST_BYTES, backward_only=True),
                            _op("fp8_transpose_attn", 2 * s * h, TRANSPOSE_BYTES, backward_only=True)),
             id(last_column): (_op("fp8_grad_mlp_cols", s * sum(g.gemm_mnk[1] for g in columns),
                                   FUSED_TWO_LAYOUT_BYTES, backward_only=True),),
             id(down): (_op("fp8_grad_mlp", s * h, CAST_BYTES, backward_only=True),
                        _op("fp8_transpose_mlp", 2 * s * h, TRANSPOSE_BYTES, backward_only=True))}
    gemms = {id(g) for g in (qkv, attn_out, down, *columns)}
    ops = []
    for op in layer.ops:
        ops.extend(before.get(id(op), ()))
        ops.append(replace(op, cast_share=0.0, grad_cast_share=0.0) if id(op) in gemms else op)
        ops.extend(after.get(id(op), ()))
    return replace(layer, ops=tuple(ops))


def with_fp8_recipe(model: ModelSpec, recipe: str, precision: str,
                    amax_fused: tuple[str, ...] = ("norm",)) -> ModelSpec:
    """`model` with the casts of `recipe` (RECIPES) when it trains in fp8; Transformer Engine's are
    the GEMMs' own (compute.py), the ones its norms write marked under delayed scaling (fp8_norm_fusion.py);
    under current scaling `amax_fused` names the producers that write the amax (fp8_current_scaling.py)."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8 recipe must be one of {RECIPES}, not {recipe!r}")
    if precision != "fp8":
        return model
    if recipe == "transformer-engine":              # delayed scaling: norms write their GEMMs' FP8 inputs
        return norm_fused_model(model)              # (fp8_norm_fusion.py)
    if recipe == "transformer-engine-mxfp8":        # the GEMMs' own casts, both layouts written (fp8_grad_casts.py)
        return mxfp8_model(model)
    if recipe == "transformer-engine-current":      # TE's casts, each after an amax pass (fp8_current_scaling.py)
        return current_scaling_model(model, tuple(amax_fused))
    return replace(model, layers=tuple(torchao_block_casts(layer) for layer in model.layers))
