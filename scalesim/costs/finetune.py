"""Fine-tuning with frozen base weights: LoRA and QLoRA, their time per layer and their memory.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
sec. 4.1): a targeted linear layer y = x W keeps W frozen and adds
x A B with A (in x r) and B (r x out) trainable. So:

- frozen weights have no gradients and no optimizer state; only the adapters'
  r (in + out) parameters per targeted layer are trained;
- each targeted layer runs two small GEMMs more in forward (x A, then (x A) B)
  and four in backward (dB, d(xA), dA, and dx through A), twice the forward's
  FLOP, plus the element-wise scale and add run unfused (costs/adapters.py, which
  also lays the adapters out as the framework does: PEFT or Megatron's fused modules);
- the backward still computes input gradients through every frozen GEMM (the
  loss must reach the earlier adapters), but the weight-gradient GEMMs
  disappear: a frozen GEMM's backward is one GEMM of the forward's size, not two;
- the embedding, frozen and first in the graph, has no backward at all.

QLoRA (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized
LLMs", sec. 3) stores the frozen block weights in 4-bit NormalFloat with
double quantisation: one 8-bit constant per block of 64 weights, and one fp32
constant per 256 of those, 4 + 8/64 + 32/(64*256) = 4.127 bits per weight
(the paper: "0.127 bits per parameter" of constants). Embedding, norms and
the output head stay 16-bit (bitsandbytes skips lm_head). Every pass over a
quantised linear layer (forward, backward, recompute) first dequantises its
weight to 16-bit in a memory-bound kernel (read 4.127 bits, write 2 bytes per
weight), then runs the 16-bit GEMM: on the roofline that kernel is DRAM time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalesim.costs.adapters import (ALL_LINEAR, ATTENTION_TARGETS, BLOCK_GEMMS, FUSED_FAMILIES,  # noqa: F401
                                     LAYOUTS, TARGET_OPS, adapter_ops, adapter_shapes,
                                     dropout_activation_bytes, resolve_targets)
from scalesim.costs.compute import (ELEMENT_BYTES, KERNEL_OVERHEAD_S, MATMUL_KINDS, LayerTime,
                                    attention_time_s, fp8_cast_s, fp8_grad_cast_s, op_time_s,
                                    streaming_bw_bytes_per_s)
from scalesim.costs.gemm_depth import DATA_GRADIENT, backward_gemms
from scalesim.costs.fp8_norm_fusion import norm_outputs_asked
from scalesim.costs.memory import (FRAGMENTATION, FRAMEWORK_OVERHEAD_BYTES, MemoryBreakdown, ddp_bucket_bytes,
                                   activation_peaks, state_bytes_per_param)
from scalesim.costs.recompute import SELECTIVE_OP, recomputed_time_s
from scalesim.costs.te_ops import op_fuser_saved_s
from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec

# NF4 with double quantisation (Dettmers et al. 2023, sec. 3, "Double Quantization").
NF4_BLOCK = 64
NF4_SECOND_BLOCK = 256
NF4_BITS_PER_WEIGHT = 4 + 8 / NF4_BLOCK + 32 / (NF4_BLOCK * NF4_SECOND_BLOCK)
NF4_BYTES_PER_WEIGHT = NF4_BITS_PER_WEIGHT / 8
FP8_WEIGHT_BYTES = 1
DEQUANT_OUTPUT_BYTES = 2          # bitsandbytes dequantises to the 16-bit compute dtype


@dataclass(frozen=True, slots=True)
class FinetuneSpec:
    """What is trained: method lora | qlora, adapter rank and targeted projections.

    qkv_split: shares of q, k and v in the fused qkv GEMM's output (h, kv_dim, kv_dim over
    h + 2 kv_dim), so an adapter on q alone has the width q has.
    fused_modules: the checkpoint itself fuses q, k, v into one linear layer and gate, up into
    another (Phi-3's qkv_proj and gate_up_proj), so PEFT adapts each fused layer as one.
    layout: peft | megatron, which modules carry adapters (costs/adapters.py).
    dropout: the adapters' dropout rate (0: no dropout kernel).
    input_bytes: bytes an element of the linears' inputs the block keeps (2; costs/memory.py FP8_SAVED_BYTES
      where Transformer Engine's fp8 linears keep fp8 copies), what a frozen linear's input frees.
    te_op_fuser: the block runs through Transformer Engine's op fuser (training.te_op_fuser; costs/te_ops.py).
    """

    method: str
    rank: int
    targets: tuple[str, ...]
    qkv_split: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)
    fused_modules: bool = False
    layout: str = "peft"
    dropout: float = 0.0
    tp: int = 1                # tensor-parallel ways (Megatron's adapters split with the base)
    input_bytes: float = 2.0
    te_op_fuser: bool = False

    @property
    def quantized(self) -> bool:
        return self.method == "qlora"


def finetune_spec(model: ModelSpec, method: str, rank: int, targets: str | list[str], layout: str = "peft",
                  dropout: float = 0.0, tp: int = 1, input_bytes: float = 2.0,
                  te_op_fuser: bool = False) -> FinetuneSpec:
    """The adapters of `model`: q, k and v take heads, kv_heads and kv_heads head widths of qkv."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    q = model.heads or 1
    kv = model.kv_heads or q
    width = q + 2 * kv
    return FinetuneSpec(method, rank, resolve_targets(targets), (q / width, kv / width, kv / width),
                        fused_modules=model.family in FUSED_FAMILIES, layout=layout, dropout=dropout,
                        tp=tp, input_bytes=input_bytes, te_op_fuser=te_op_fuser)


def trainable_params(layer: LayerSpec, spec: FinetuneSpec | None) -> int:
    """Parameters with gradients: all of them in full training, r (in + out) per adapter in LoRA.

    >>> from scalesim.models import get_model
    >>> llama = get_model("llama2-7b", seq_len=512)        # PEFT on Llama-2-7b, r=8, q and v:
    >>> spec = finetune_spec(llama, "lora", 8, ["q", "v"])  # "trainable params: 4,194,304"
    >>> sum(trainable_params(layer, spec) for layer in llama.layers)
    4194304
    """
    if spec is None:
        return layer.params
    return sum(spec.rank * (k + n) for _, _, k, n in adapter_shapes(layer, spec))


def trained_params(layers, spec: FinetuneSpec | None) -> int:
    """Parameters with gradients in all of `layers` (the model's or a stage's): what an optimizer
    updates and a checkpoint saves."""
    return sum(trainable_params(layer, spec) for layer in layers)


def quantized_weights(layer: LayerSpec) -> int:
    """Weights QLoRA stores in NF4: the block GEMMs' matrices (biases, norms, embedding, head stay 16-bit)."""
    if layer.kind != "transformer_block":
        return 0
    return sum(op.gemm_mnk[1] * op.gemm_mnk[2] for op in layer.ops if op.name in BLOCK_GEMMS and op.gemm_mnk)


def stored_weight_bytes(layer: LayerSpec, precision: str, spec: FinetuneSpec | None) -> float:
    """Bytes of the layer's frozen base weights as stored (16-bit; NF4 under QLoRA; the block
    matrices in FP8 under LoRA in fp8), adapters excluded."""
    ebytes = ELEMENT_BYTES[precision]
    if spec is None:
        return float(layer.params * ebytes)
    if spec.quantized:
        per_weight = NF4_BYTES_PER_WEIGHT
    elif precision == "fp8":
        # A frozen matrix is only ever read by FP8 GEMMs, so FP8 recipes keep it in FP8 alone
        # (Transformer Engine fp8_model_init; NeMo's fp8_params, as NVIDIA's MLPerf Training
        # v4.0 Llama 2 70B LoRA runs it).
        per_weight = FP8_WEIGHT_BYTES
    else:
        return float(layer.params * ebytes)
    q = quantized_weights(layer)
    return q * per_weight + (layer.params - q) * ebytes


def dequantize_s(weights: float, gpu: GpuSpec, held_sms: int = 0) -> float:
    """One NF4 -> 16-bit dequantisation of `weights` weights: memory-bound, read 4.127 bits, write 2 bytes."""
    return weights * (NF4_BYTES_PER_WEIGHT + DEQUANT_OUTPUT_BYTES) / streaming_bw_bytes_per_s(gpu, held_sms) \
        + KERNEL_OVERHEAD_S


def finetune_layer_time(layer: LayerSpec, gpu: GpuSpec, precision: str, batch: int, spec: FinetuneSpec,
                        checkpointing: str = "none", attention: str = "flash",
                        memory_format: str = "nhwc", held_sms: int = 0) -> LayerTime:
    """Forward, backward and recompute time of a layer whose base weights are frozen (module docstring)."""
    fwd = bwd = attention_s = matmul = 0.0
    times = []
    layer = norm_outputs_asked(layer, adapter_shapes(layer, spec))     # adapters read the 16-bit norm output
    if layer.kind != "embedding":
        for op in layer.ops:
            t = op_time_s(op, gpu, precision, batch, attention, memory_format, held_sms)
            times.append(0.0 if op.backward_only else t)
            if op.backward_only:        # its elements are the backward kernel's own (compute.py layer_time)
                bwd += t
                continue
            fwd += t
            if op.kind == "attention":
                attention_s += t
                matmul += t
                bwd += attention_time_s(op, gpu, precision, batch, attention, backward=True, held_sms=held_sms)
            elif op.kind in MATMUL_KINDS:
                matmul += t
                # the input-gradient GEMM only, at its own depth n (costs/gemm_depth.py) where that is priced
                gemms = backward_gemms(op, gpu, precision, batch)
                bwd += (op_time_s(op, gpu, precision, batch, attention, memory_format, held_sms, DATA_GRADIENT, gemms[0][1])
                        if gemms else t)
                if precision == "fp8":  # FP8 casts its output gradient, not its input again (costs/fp8_grad_casts.py)
                    bwd += (fp8_grad_cast_s(op, gpu, batch, held_sms, weight_gradient=False)
                            - (0.0 if gemms else fp8_cast_s(op, gpu, batch, held_sms)))
            elif op.backward_elements is None:
                bwd += (t - KERNEL_OVERHEAD_S) * 2.0 + KERNEL_OVERHEAD_S
            else:                       # backward kernels of its own size (costs/fp8_act_store.py's cast back)
                own = op.backward_elements * batch * ELEMENT_BYTES[precision]
                bwd += own / streaming_bw_bytes_per_s(gpu, held_sms) + KERNEL_OVERHEAD_S
    else:
        fwd = sum(op_time_s(op, gpu, precision, batch, attention, memory_format, held_sms) for op in layer.ops)
    flop = layer.forward_flop * batch
    for shape in adapter_shapes(layer, spec):
        forward, backward = adapter_ops(shape, spec, batch)
        fwd += sum(op_time_s(op, gpu, precision, 1, held_sms=held_sms) for op in forward)
        bwd += sum(op_time_s(op, gpu, precision, 1, held_sms=held_sms) for op in backward)
        flop += sum(op.flop for op in forward if op.kind == "gemm")
    # kernels Transformer Engine's op fuser folds into others (costs/te_ops.py)
    saved_forward, saved_backward = op_fuser_saved_s(layer, gpu, precision, batch, spec, held_sms)
    fwd -= saved_forward
    bwd -= saved_backward
    if spec.quantized:
        dequant = sum(dequantize_s(op.gemm_mnk[1] * op.gemm_mnk[2], gpu, held_sms)
                      for op in layer.ops if op.name in BLOCK_GEMMS and op.gemm_mnk)
        fwd += dequant
        bwd += dequant
    # selective-op: the base layer's unsaved ops (adapters and dequantisation are left out)
    recompute = {"none": 0.0, "selective": attention_s, "full": fwd,
                 SELECTIVE_OP: recomputed_time_s(layer, times) if times else 0.0}[checkpointing]
    return LayerTime(fwd, bwd, recompute, flop, matmul)


def frozen_input_bytes(layer: LayerSpec, spec: FinetuneSpec | None, boundary_bytes_per_sample: float) -> float:
    """Bytes per sample a block does not keep because only a frozen GEMM would read them.

    A linear layer keeps its input for the weight gradient alone: Transformer Engine's Linear
    saves it only `if weight.requires_grad` (transformer_engine/pytorch/module/linear.py,
    `saved_inputmat`), and PyTorch's generated autograd guards each saved input by the one
    gradient that uses it (tools/autograd/gen_variable_type.py, `guard_for`: mm's input is
    kept only when its weight needs a gradient). With the base frozen, what no adapter reads
    goes: the attention's qkv input without q, k, v adapters, the MLP's input without gate or
    up adapters (each a norm output, shaped and sharded like the block input), and the down
    projection's input without a down adapter (its local tokens x f/tp). QLoRA's base runs
    bitsandbytes' own matmul, not checked here: nothing is taken off. Each at the bytes the block
    counted it at (`spec.input_bytes`: the fp8 copy Transformer Engine's fp8 linears would keep,
    which costs/memory.py te_fp8_input_saving has already taken the rest of).
    """
    if spec is None or spec.quantized or layer.kind != "transformer_block":
        return 0.0
    targets = set(spec.targets)
    freed = boundary_bytes_per_sample * ((not targets & {"q", "k", "v"}) + (not targets & {"gate", "up"}))
    down = next((op.gemm_mnk for op in layer.ops if op.name == "mlp_down" and op.gemm_mnk), None)
    if down is not None and "down" not in targets:
        freed += 2.0 * down[0] * down[2]
    return min(freed * spec.input_bytes / 2.0, layer.activation_bytes)


def _adapter_activation_bytes(layers, spec: FinetuneSpec, micro_batch: int, checkpointing: str,
                              recomputed: tuple[bool, ...] = ()) -> float:
    """x A of every adapter, kept for dB (16-bit, r per token), and what adapter dropout keeps
    (costs/adapters.py, dropout_activation_bytes); recomputed under full checkpointing (in the
    layers `recomputed` flags, all if empty)."""
    flags = recomputed or (True,) * len(layers)
    kept = [layer for layer, flag in zip(layers, flags) if not (checkpointing == "full" and flag)]
    return float(sum(2 * m * spec.rank for layer in kept for _, m, _, _ in adapter_shapes(layer, spec))
                 * micro_batch + sum(dropout_activation_bytes(layer, spec, 2) for layer in kept) * micro_batch)


def finetune_memory(layers, *, micro_batch: int, in_flight: float, precision: str, optimizer: str,
                    checkpointing: str, flash_attention: bool, boundary_bytes_per_sample: float,
                    spec: FinetuneSpec | None, zero: int = 0, shards: int = 1, offload_optimizer: bool = False,
                    offload_params: bool = False, grad_reduce_bytes: float | None = None,
                    bucket_view: bool = False, cross_entropy: str = "fused",
                    recomputed: tuple[bool, ...] = (), recompute_modules: tuple[str, ...] = ()) -> MemoryBreakdown:
    """Peak memory of one GPU holding `layers` when fine-tuning (`spec`) or offloading weights.

    Base weights as stored (`stored_weight_bytes`): all of them; 1/shards under
    ZeRO-3 / FSDP (plus two layers gathered, FSDP's in-flight limit); with
    `offload_params` (ZeRO-Infinity, Rajbhandari et al. 2021; FSDP CPUOffload)
    only the two layers in flight. QLoRA also holds one dequantised 16-bit
    matrix, the largest, at a time. The trained parameters (the adapters, or
    all weights in full training) carry gradients and optimizer state as in
    `scalesim.costs.memory.training_memory`; with offloaded weights full
    training moves each layer's gradients to the host as they are produced
    (two layers' worth on the GPU). Activations as in full training, less the
    inputs only frozen GEMMs would read (`frozen_input_bytes`), plus the adapters' x A.
    `recompute_modules` as in `training_memory` (full training with offloaded weights: the scenario
    refuses them with adapters, whose frozen inputs would be freed twice).
    """
    w16, g, o = state_bytes_per_param(precision, optimizer)
    stored = [stored_weight_bytes(layer, precision, spec) for layer in layers]
    biggest = max(stored, default=0.0)
    if offload_params:
        base = 2 * biggest
    else:
        base = sum(stored) / (shards if zero >= 3 else 1) + (2 * biggest if zero >= 3 else 0.0)
    if spec is not None and spec.quantized:
        base += DEQUANT_OUTPUT_BYTES * max((op.gemm_mnk[1] * op.gemm_mnk[2] for layer in layers
                                            for op in layer.ops if op.name in BLOCK_GEMMS and op.gemm_mnk),
                                           default=0)
    trained = float(sum(trainable_params(layer, spec) for layer in layers))
    kept = [replace(layer, activation_bytes=layer.activation_bytes
                    - frozen_input_bytes(layer, spec, boundary_bytes_per_sample)) for layer in layers]
    acts, cached = activation_peaks(kept, micro_batch, precision, checkpointing, flash_attention,
                                    boundary_bytes_per_sample, in_flight, cross_entropy, recomputed, recompute_modules)
    if spec is None:          # full training with offloaded weights: the base is the trained weights
        weights = base
        grads = 2 * max((layer.params for layer in layers), default=0) * g
    else:
        weights = base + trained * w16 / (shards if zero >= 3 else 1)
        grads = trained * g / (shards if zero >= 2 else 1)
        acts += _adapter_activation_bytes(layers, spec, micro_batch, checkpointing, recomputed)
    opt = 0.0 if offload_optimizer or (offload_params and spec is None) else \
        trained * o / (shards if zero >= 1 else 1)
    buckets = trained * ddp_bucket_bytes(g, grad_reduce_bytes, zero, shards, bucket_view)
    live = weights + grads + opt + buckets + acts
    return MemoryBreakdown(weights, grads, opt, buckets, acts, FRAMEWORK_OVERHEAD_BYTES + FRAGMENTATION * live,
                           cached)


def host_weight_bytes(layers, precision: str, spec: FinetuneSpec | None, zero: int, shards: int) -> float:
    """Bytes of base weights one GPU's share keeps in host memory when they are offloaded."""
    total = sum(stored_weight_bytes(layer, precision, spec) for layer in layers)
    return total / (shards if zero >= 3 else 1)
