"""LoRA adapters as the fine-tuning framework lays them out: which linear layers carry one,
their shapes, and the kernels each runs (the cost of a frozen base is in costs/finetune.py).

Two layouts of the same method (Hu et al. 2021) run different kernels:

- `peft`: Hugging Face PEFT wraps each targeted nn.Linear of the checkpoint in its own LoraLayer
  (peft/tuners/lora/layer.py, `Linear.forward`: `result + lora_B(lora_A(dropout(x))) * scaling`
  per adapter). Llama's q_proj, k_proj and v_proj are three linear layers, so "q, k, v" is three
  adapters, three dropouts of the same input, three scale and add passes. Checkpoints whose own
  modules are fused (Phi-3's qkv_proj, gate_up_proj) get one adapter per fused module.
- `megatron`: NeMo's LoRA on Megatron-core (nemo/collections/nlp/modules/common/megatron/adapters/
  mcore_mixins.py, ParallelLinearAdapter) adapts Megatron's fused modules: linear_qkv (one adapter
  over q, k and v: `mixed_qkv = mixed_qkv + lora_kqv_adapter(layernorm_output)`), linear_proj,
  linear_fc1 (gate and up together) and linear_fc2. NeMo's `target_modules: ['attention']` is
  linear_qkv + linear_proj. This is the MLPerf Training Llama 2 70B LoRA reference and NVIDIA's
  and AMD's NeMo submissions (mlcommons/training_results_v4.0 NVIDIA/benchmarks/llama2_70b_lora/
  implementations/nemo/conf/megatron_gpt_peft_tuning_config.yaml: `peft_scheme: "lora"`,
  `target_modules: ['attention']`, `adapter_dim: 16`, `adapter_dropout: 0.1`, `dropout_position: "pre"`).

Adapter dropout (`dropout` > 0: PEFT's lora_dropout, NeMo's adapter_dropout at position "pre")
runs one dropout kernel on each adapter's input in forward (read x, write the dropped copy and a
1-byte mask) and its gradient in backward (read the gradient and the mask, write one); the adapter
keeps the dropped copy and the mask for backward instead of x. A rate of 0 is the identity, no
kernel (PEFT builds nn.Identity; NeMo skips the dropout module).
"""

from __future__ import annotations

from scalesim.models.spec import LayerSpec, OpSpec
from scalesim.models.transformer import elementwise_op, gemm_op

# Which GEMM of a block (scalesim/models/transformer.py) holds each projection: q, k and v share
# the fused qkv GEMM, split in proportion to their widths (FinetuneSpec.qkv_split).
TARGET_OPS = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "attn_out", "gate": "mlp_gate", "up": "mlp_up",
              "down": "mlp_down"}
ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")
ATTENTION_TARGETS = ("q", "k", "v", "o")
BLOCK_GEMMS = ("qkv", "attn_out", "mlp_gate", "mlp_up", "mlp_down")
LAYOUTS = ("peft", "megatron")

# Checkpoints whose projections are fused modules (HF Phi3: qkv_proj, gate_up_proj; config source in the zoo).
FUSED_FAMILIES = ("phi3",)
FUSED = {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "gate_up", "up": "gate_up"}

# The tensor each adapter reads: adapters on q, k and v (or the fused qkv) read the same block input.
ADAPTER_INPUT = {"q": "attention_in", "k": "attention_in", "v": "attention_in", "qkv": "attention_in",
                 "o": "o", "gate": "mlp_in", "up": "mlp_in", "gate_up": "mlp_in", "down": "down"}

# Dropout's mask: one byte per element (PyTorch's native dropout keeps a bool mask for backward).
DROPOUT_MASK_BYTES = 1
# Transformer Engine's Dropout op (te.ops.Dropout, what NeMo's op-fused LoRA runs): one bit per element,
# `allocateTorchTensor(input_nvte.numel() / 8, DType::kByte)` (transformer_engine/pytorch/csrc/extensions/
# dropout.cpp, dropout_fwd @release_v2.8).
TE_DROPOUT_MASK_BYTES = 1 / 8

# The adapter kernels Transformer Engine's op fuser runs inside GEMMs (training.te_op_fuser; NeMo's
# TEFusedLoRALinear, nemo/collections/llm/peft/lora.py @2182063e (25.09-alpha), on te.ops @release_v2.8): the scale and
# the add into y in lora_b's GEMM (ForwardLinearScaleAdd: alpha = scale, beta = 1 into the base output),
# the scale's gradient in lora_b's data-gradient GEMM (BackwardLinearScale: alpha), and the add of the
# adapter's dx into the base's data-gradient GEMM (BackwardLinearAdd: beta = 1; costs/te_ops.py prices
# the two beta = 1 reads).
OP_FUSED_AWAY = ("lora_scale", "lora_add", "lora_scale_grad", "lora_dx_add")


def resolve_targets(targets: str | list[str]) -> tuple[str, ...]:
    """all-linear / attention / an explicit list, as projection names in block order."""
    chosen = {"all-linear": ALL_LINEAR, "attention": ATTENTION_TARGETS}.get(targets) \
        if isinstance(targets, str) else tuple(targets)
    return tuple(t for t in ALL_LINEAR if t in chosen)


def adapter_shapes(layer: LayerSpec, spec) -> list[tuple[str, int, int, int]]:
    """(projection, tokens, in, out) of each adapter in this layer, one sample; in and out are
    the GEMM's local k and n (under tensor parallelism the adapter splits as its GEMM does).

    `spec` is a costs/finetune.py FinetuneSpec: its targets, qkv_split, fused_modules and layout.

    >>> from scalesim.models import get_model
    >>> from scalesim.costs.finetune import finetune_spec
    >>> llama = get_model("llama2-7b", seq_len=512)
    >>> [s[0] for s in adapter_shapes(llama.layers[1], finetune_spec(llama, "lora", 8, "attention"))]
    ['q', 'k', 'v', 'o']
    >>> [s[0] for s in adapter_shapes(llama.layers[1], finetune_spec(llama, "lora", 8, "attention", "megatron"))]
    ['qkv', 'o']
    """
    if layer.kind != "transformer_block":
        return []
    gemms = {op.name: op.gemm_mnk for op in layer.ops if op.kind == "gemm"}
    if spec.fused_modules or spec.layout == "megatron":
        return _fused_shapes(gemms, spec)
    shapes = []
    for target in spec.targets:
        mnk = gemms.get(TARGET_OPS[target])
        if mnk is None:
            continue
        m, n, k = mnk
        if target in ("q", "k", "v"):
            n = round(n * spec.qkv_split["qkv".index(target)])
        shapes.append((target, m, k, n))
    return shapes


def _fused_shapes(gemms: dict, spec) -> list[tuple[str, int, int, int]]:
    """One adapter per fused module any target falls in: qkv whole, gate and up together."""
    shapes, seen = [], set()
    for target in spec.targets:
        module = FUSED.get(target, target)
        if module in seen:
            continue
        seen.add(module)
        if module == "gate_up":
            if "mlp_gate" not in gemms:          # a gelu MLP: up alone is linear_fc1
                if "mlp_up" in gemms:
                    m, n, k = gemms["mlp_up"]
                    shapes.append(("up", m, k, n))
                continue
            (m, n, k), (_, n_up, _) = gemms["mlp_gate"], gemms["mlp_up"]
            shapes.append((module, m, k, n + n_up))
        elif TARGET_OPS.get(target) in gemms:
            m, n, k = gemms[TARGET_OPS[target]]
            shapes.append((module, m, k, n))
    return shapes


def dropout_op(name: str, elements: int, mask_bytes: float = DROPOUT_MASK_BYTES) -> OpSpec:
    """One dropout pass (or its gradient) over `elements`: reads one tensor, writes one, and writes
    (or reads) the mask, `mask_bytes` per element (1: half a 16-bit element per element)."""
    op = elementwise_op(name, elements)
    return OpSpec(op.name, op.kind, op.flop, op.elements_moved + elements * mask_bytes / 2)


def mask_bytes(spec) -> float:
    """Bytes of dropout mask an adapter keeps per input element: one bit under Transformer Engine's op
    fuser (its Dropout op), one byte otherwise."""
    return TE_DROPOUT_MASK_BYTES if fused_adapters(spec) else DROPOUT_MASK_BYTES


def fused_adapters(spec) -> bool:
    """Whether the adapters run through Transformer Engine's op fuser: NeMo builds TEFusedLoRALinear for a
    Megatron-core adapter only at tensor parallelism 1 (`enable_op_fuser = ... and
    parallel_state.get_tensor_model_parallel_world_size() == 1`, "TP not yet supported")."""
    return spec.te_op_fuser and spec.layout == "megatron" and spec.tp == 1


# Megatron's adapter on a column-parallel module (linear_qkv, linear_fc1) reads the full input and
# writes this rank's output columns; on a row-parallel one (linear_proj, linear_fc2) the reverse.
COLUMN_PARALLEL = ("q", "k", "v", "qkv", "gate", "up", "gate_up")


def megatron_widths(shape: tuple[str, int, int, int], rank: int, tp: int) -> tuple[int, int]:
    """(A's columns, B's output width) one rank computes of a Megatron-core adapter whose base
    GEMM's local shape is `shape`, under tensor parallelism `tp`.

    NeMo's ParallelLinearAdapter (nemo/collections/nlp/modules/common/megatron/adapters/
    parallel_adapters.py) splits both of its linear layers: beside a column-parallel base
    (linear_qkv, linear_fc1) linear_in is a ColumnParallelLinear with gathered output (r / tp of
    A's columns on the full input; with Transformer Engine >= 1.5 the layernorm output it reads
    is already gathered, so its dropout runs on the full input) and linear_out a ColumnParallelLinear
    to the rank's output columns, as the base; beside a row-parallel base (linear_proj, linear_fc2)
    linear_in is a RowParallelLinear on the rank's input columns and linear_out a ColumnParallelLinear
    whose out / tp columns an all-to-all turns into the rank's sequence shard (a2a_experimental,
    LORA_A2A=1 in NVIDIA's MLPerf configs), where the scale and add run. Either way every GEMM of
    the adapter does 1/tp of the whole adapter's FLOP. The adapter's own gathers, all-reduce of
    x A and all-to-alls are not modelled (tens of MB per layer).

    >>> megatron_widths(("qkv", 8192, 8192, 2560), 16, 4), megatron_widths(("o", 8192, 2048, 8192), 16, 4)
    ((4, 2560), (16, 2048))
    """
    name, _, _, n = shape
    if tp <= 1:
        return rank, n
    if name in COLUMN_PARALLEL:
        return -(-rank // tp), n
    return rank, -(-n // tp)


def adapter_ops(shape: tuple[str, int, int, int], spec, batch: int) -> tuple[tuple, tuple]:
    """Forward and backward ops of one adapter for a whole micro-batch (t = tokens x batch);
    under tensor parallelism a Megatron adapter runs one rank's share (`megatron_widths`).

    Forward (PEFT's LoraLayer, NeMo's ParallelLinearAdapter): dropout of x when the rate is
    above 0, x A (t x r), (x A) B (t x out), scaled, added into y. Backward: the scale's
    gradient, dB = (x A)^T dy, d(x A) = dy B^T, dA = x^T d(x A), dx += d(x A) A^T (a GEMM,
    through the dropout's gradient when there is one, then the add into the frozen path's dx).

    >>> from scalesim.costs.finetune import FinetuneSpec
    >>> plain, dropped = FinetuneSpec("lora", 16, ("q",)), FinetuneSpec("lora", 16, ("q",), dropout=0.1)
    >>> [len(ops) for ops in adapter_ops(("q", 512, 4096, 4096), plain, 1)]
    [4, 6]
    >>> [len(ops) for ops in adapter_ops(("q", 512, 4096, 4096), dropped, 1)]
    [5, 7]
    """
    _, m, k, n = shape
    t = m * batch
    rank = spec.rank
    # A's columns and B's output width on this rank: the base GEMM's local shape, except that
    # Megatron splits the adapter's other linear layer too (megatron_widths).
    r_in, n = megatron_widths(shape, rank, spec.tp) if spec.layout == "megatron" else (rank, n)
    forward = (gemm_op("lora_a", t, r_in, k), gemm_op("lora_b", t, n, rank),
               elementwise_op("lora_scale", t * n), elementwise_op("lora_add", t * n, inputs=2))
    backward = (elementwise_op("lora_scale_grad", t * n), gemm_op("lora_db", rank, n, t),
                gemm_op("lora_dxa", t, rank, n), gemm_op("lora_da", k, r_in, t), gemm_op("lora_dx", t, k, r_in),
                elementwise_op("lora_dx_add", t * k, inputs=2))
    if spec.dropout > 0:
        mask = mask_bytes(spec)
        forward = (dropout_op("lora_dropout", t * k, mask),) + forward
        backward = backward[:-1] + (dropout_op("lora_dropout_grad", t * k, mask),) + backward[-1:]
    if fused_adapters(spec):
        forward = tuple(op for op in forward if op.name not in OP_FUSED_AWAY)
        backward = tuple(op for op in backward if op.name not in OP_FUSED_AWAY)
    return forward, backward


def dropout_activation_bytes(layer: LayerSpec, spec, ebytes: float) -> float:
    """Bytes per sample adapter dropout adds to what a block keeps for backward: each dropout keeps
    its output (ebytes) and mask (`mask_bytes`) per input element, for dA and its own gradient, where
    without dropout the adapters read x, which the block's count already holds (once per input)."""
    if spec.dropout <= 0:
        return 0.0
    shapes = adapter_shapes(layer, spec)
    inputs = {ADAPTER_INPUT[name]: m * k for name, m, k, _ in shapes}
    kept = sum((ebytes + mask_bytes(spec)) * m * k for _, m, k, _ in shapes)
    return max(0.0, kept - ebytes * sum(inputs.values()))
