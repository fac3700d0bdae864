"""NeMo 25.09's two kernel-level switches in NVIDIA's MLPerf Training v5.1 Llama 2 70B LoRA recipe, as the
kernels they remove (training.te_op_fuser, training.fused_qkv_rope). Pure functions.

The recipe (mlcommons/training_results_v5.1 @441d65f4 NVIDIA/benchmarks/llama2_70b_lora/implementations/nemo:
config_common.sh `USE_TE_OPS=1`, `FUSED_SINGLE_QKV_ROPE=1` -> conf/megatron_gpt_peft_tuning_config.yaml
`use_transformer_engine_op_fuser`, `fused_single_qkv_rope` -> train.py `llm.Llama2Config70B(...)`) runs
NeMo 25.09-alpha.rc2, Megatron-Core 25.09-alpha.rc1 and Transformer Engine release_v2.8 (its Dockerfile).

te_op_fuser, in two places:

- The LoRA linears. NeMo's LoRA builds `TEFusedLoRALinear` for a Megatron-core adapter when the config asks
  for the op fuser and tensor parallelism is 1 (nemo/collections/llm/peft/lora.py on NeMo's 25.09-alpha branch
  @2182063e, which has it since NVIDIA/NeMo#14411; `enable_op_fuser`):
  a main branch te.ops.Sequential [RMSNorm, Quantize (linear_qkv, a LayerNormLinear) ->] MakeExtraOutput
  (in_place) -> Linear, and a LoRA branch Dropout -> Linear (A) -> Linear (B) -> ConstantScale ->
  AddExtraInput (in_place). Transformer Engine's fuser (transformer_engine/pytorch/ops/fused/ @release_v2.8)
  turns B + scale + add into one GEMM (forward_linear_scale_add.py: `alpha=scale_op.scale`, `out=extra_input,
  accumulate_into_out=True`), the scale's gradient into B's data-gradient GEMM (backward_linear_scale.py:
  `grad_input_alpha`, `grad_weight_alpha`) and the add of the adapter's input gradient into the base's
  data-gradient GEMM (backward_linear_add.py: `grad_input=..., accumulate_into_grad_input=True`): the scale,
  add, scale-gradient and dx-add kernels go (costs/adapters.py OP_FUSED_AWAY); the two GEMMs with beta = 1
  read their output first (priced here at the DRAM rate). Without the fuser NeMo's LoRALinear asks the
  LayerNormLinear for its norm output, and Transformer Engine then writes the norm in 16 bits and casts it
  to FP8 in a kernel of its own (transformer_engine/pytorch/module/layernorm_linear.py: `with_quantized_norm
  = fp8 and ... not return_layernorm_output`); te.ops.RMSNorm is handed the Quantize op's quantizer
  (`rmsnorm_fwd(..., next_op_input_quantizer, ...)`, ops/basic/rmsnorm.py) and writes FP8 itself: linear_qkv's
  input cast goes and the norm writes 1 byte an element, not 2. The adapter's dropout becomes te.ops.Dropout,
  whose mask is one bit an element (costs/adapters.py TE_DROPOUT_MASK_BYTES).
- The MLP. Megatron-Core's layer spec swaps MLP for `TEFusedMLP` (megatron/core/models/gpt/gpt_layer_specs.py
  @25.09-alpha.rc1: `module = TEFusedMLP if use_te_op_fuser else MLP`; megatron/core/extensions/
  transformer_engine.py: RMSNorm -> BasicLinear fc1 -> SwiGLU -> BasicLinear fc2), at any tensor parallelism.
  The activation op is handed fc2's input quantizer forward and fc1's grad-output quantizer backward
  (ops/basic/activation.py: `_activation_forward_impl(x, next_op_input_quantizer)`,
  `_activation_backward_impl(dy, x, ctx.prev_op_grad_output_quantizer)`): in FP8 it writes linear_fc2's FP8
  input and linear_fc1's FP8 output gradient itself, so fc2's input cast and fc1's gradient cast go and the
  activation writes 1 byte an element instead of 2 each way. (Megatron's own MLP runs the fused SwiGLU in 16
  bits and Transformer Engine's Linear casts after it.) fc1's norm wrote FP8 before too (a LayerNormLinear
  whose norm output nobody asks for).

Not modelled: TE's Dropout reading linear_qkv's FP8 norm output (1 byte an element instead of 2) and the
small RNG-offset kernel it launches; the v5.0 path's thunder dropout (NEMO_LORA_USE_THUNDER_DROPOUT=1)
is priced as PyTorch's.

fused_qkv_rope: Megatron-Core's SelfAttention keeps linear_qkv's output whole (`split_qkv = False` when
fused_single_qkv_rope, RoPE on q and k, no packed sequences, no q/k norm; megatron/core/transformer/
attention.py @25.09-alpha.rc1) and calls Transformer Engine's `apply_fused_qkv_rotary_pos_emb`
(transformer_engine/pytorch/attention/rope.py, FusedQKVRoPEFunc @release_v2.8): one kernel reads the
[s, b, groups, (heads/groups + 2) x d] qkv and writes q and k rotated and v
(`tex.fused_qkv_rope_forward`), one kernel back (`tex.fused_qkv_rope_backward` of dq, dk, dv into dqkv).
Without it q, k and v are split from that tensor (SplitAlongDim), q reshaped to its heads (a copy: its
groups' columns are not adjacent under grouped-query attention), q and k rotated one kernel each, and in
backward the two rotations' gradients and the split's concatenation. scalesim prices that path as one
rotation kernel of q and k each way (`rope`, models/transformer.py), so the fused kernel replaces it: one
kernel each way over q, k and v in and out (2 (q + 2 kv) s elements, where `rope` moves 2 (q + kv) s
forward and twice that backward). The q copy, the second rotation and the concatenation the unfused path
also runs are not in scalesim's price of it, so the key takes off less than the switch did.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.adapters import adapter_shapes, fused_adapters, megatron_widths
from scalesim.costs.compute import ELEMENT_BYTES, fp8_cast_s, fp8_grad_cast_s, streaming_bw_bytes_per_s
from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec

FP8_BYTES = 1.0                       # what a kernel writes per element when it quantizes its own output
QKV_ADAPTERS = ("q", "k", "v", "qkv")  # adapters beside linear_qkv, the LayerNormLinear the fused LoRA norms
ACTIVATIONS = ("swiglu", "gelu")      # the MLP's activation op (models/transformer.py)
FC1 = ("mlp_gate", "mlp_up")


def _dram_s(bytes_read: float, gpu: GpuSpec) -> float:
    return bytes_read / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)


def op_fuser_saved_s(layer: LayerSpec, gpu: GpuSpec, precision: str, batch: int, spec,
                     held_sms: int = 0) -> tuple[float, float]:
    """(forward, backward) seconds Transformer Engine's op fuser takes off one micro-batch of a block's frozen
    path, beyond the adapter kernels costs/adapters.py already leaves out (module docstring): the casts the
    norm and the activation now write themselves, their halved writes, less the two GEMMs' beta = 1 reads.

    >>> from scalesim.models import get_model
    >>> from scalesim.hardware import get_gpu
    >>> from scalesim.costs.finetune import finetune_spec
    >>> llama = get_model("llama2-7b", seq_len=1024)
    >>> spec = finetune_spec(llama, "lora", 16, "attention", "megatron", 0.1, te_op_fuser=True)
    >>> fwd, bwd = op_fuser_saved_s(llama.layers[1], get_gpu("b200"), "fp8", 1, spec)
    >>> fwd > 0 and bwd > 0
    True
    >>> op_fuser_saved_s(llama.layers[1], get_gpu("b200"), "fp8", 1, finetune_spec(llama, "lora", 16, "attention"))
    (0.0, 0.0)
    """
    if spec is None or not spec.te_op_fuser or layer.kind != "transformer_block":
        return 0.0, 0.0
    ops = {op.name: op for op in layer.ops}
    stream = streaming_bw_bytes_per_s(gpu, held_sms)
    halved = ELEMENT_BYTES[precision] - FP8_BYTES       # bytes a quantizing kernel writes less per element
    fp8 = precision == "fp8"
    forward = backward = 0.0
    if fused_adapters(spec):
        shapes = adapter_shapes(layer, spec)
        qkv = ops.get("qkv")
        if fp8 and qkv is not None and qkv.gemm_mnk is not None and any(s[0] in QKV_ADAPTERS for s in shapes):
            m, _, k = qkv.gemm_mnk
            forward += fp8_cast_s(qkv, gpu, batch, held_sms) + m * batch * k * halved / stream
        ebytes = ELEMENT_BYTES[precision]
        for shape in shapes:
            _, m, k, _ = shape
            _, n = megatron_widths(shape, spec.rank, spec.tp)
            forward -= _dram_s(m * batch * n * ebytes, gpu)     # lora_b's GEMM reads y before adding into it
            backward -= _dram_s(m * batch * k * ebytes, gpu)    # the base's dgrad GEMM reads the adapter's dx
    down = ops.get("mlp_down")
    if fp8 and down is not None and down.gemm_mnk is not None and any(name in ops for name in ACTIVATIONS):
        m, _, k = down.gemm_mnk
        forward += fp8_cast_s(down, gpu, batch, held_sms) + m * batch * k * halved / stream
        for op in (ops[name] for name in FC1 if name in ops and ops[name].gemm_mnk is not None):
            m, n, _ = op.gemm_mnk
            backward += fp8_grad_cast_s(op, gpu, batch, held_sms, weight_gradient=False) + m * batch * n * halved / stream
    return forward, backward


def _fused_rope_layer(layer: LayerSpec) -> LayerSpec:
    ops = {op.name: op for op in layer.ops}
    qkv = ops.get("qkv")
    if (layer.kind != "transformer_block" or "rope" not in ops or qkv is None or qkv.gemm_mnk is None
            or qkv.parts or "mla_q_up" in ops):     # parts: separate wq, wk, wv (costs/projections.py)
        return layer
    m, n, _ = qkv.gemm_mnk
    moved = 2.0 * m * n          # reads q, k, v as linear_qkv wrote them, writes q, k (rotated) and v
    return replace(layer, ops=tuple(replace(op, elements_moved=moved, backward_elements=moved)
                                    if op.name == "rope" else op for op in layer.ops))


def fused_qkv_rope_model(model: ModelSpec) -> ModelSpec | None:
    """`model` with each dense block's RoPE as Transformer Engine's fused QKV + RoPE kernel (module
    docstring); None when no block has a RoPE beside a fused qkv projection (not with
    training.fused_projections false: separate q, k, v GEMMs leave no linear_qkv output to split).

    >>> from scalesim.models import get_model
    >>> llama = get_model("llama2-7b", seq_len=512)
    >>> fused = fused_qkv_rope_model(llama)
    >>> [op.backward_elements for op in fused.layers[1].ops if op.name == "rope"] == [2.0 * 512 * 3 * 4096]
    True
    >>> fused_qkv_rope_model(get_model("gpt3-1.3b", seq_len=512)) is None
    True
    """
    layers = tuple(_fused_rope_layer(layer) for layer in model.layers)
    if all(new is old for new, old in zip(layers, model.layers)):
        return None
    return replace(model, layers=layers)
