"""A scenario's `training:` section: what is trained, in which precision, with which kernels and
budget (split from scenario/__init__.py, which re-exports it)."""

from __future__ import annotations

from typing import Literal

import pydantic

from scalesim.scenario.frameworks import Framework
from scalesim.schema import Strict

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


class LoraSpec(Strict):
    """Low-rank adapters (Hu et al. 2021, LoRA): rank r matrices A (in x r) and B (r x out) beside
    each targeted linear layer. all-linear: every projection of every block (PEFT's
    target_modules="all-linear", the output head excluded); attention: q, k, v and o."""

    rank: pydantic.PositiveInt = 16
    targets: Literal["all-linear", "attention"] | list[Literal["q", "k", "v", "o", "gate", "up", "down"]] = \
        "all-linear"
    # Which modules carry the adapters (scalesim/costs/adapters.py): peft = one per targeted linear of
    # the checkpoint (Hugging Face PEFT: q, k, v apart); megatron = NeMo / Megatron-core's fused
    # linear_qkv, linear_proj, linear_fc1 (gate and up), linear_fc2.
    layout: Literal["peft", "megatron"] = "peft"
    # Adapter dropout rate (PEFT lora_dropout, NeMo adapter_dropout): a dropout kernel and its mask
    # on each adapter's input; 0 = none.
    dropout: float = pydantic.Field(0.0, ge=0.0, lt=1.0)

    @pydantic.field_validator("targets")
    @classmethod
    def _targets_listed_once(cls, value):
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError(f"targets must name each of {', '.join(LORA_TARGETS)} at most once, and at least "
                             f"one (or be all-linear or attention); got {value!r}")
        return value


class TrainingSpec(Strict):
    # The training code the scenario runs: a preset of defaults for the keys below that describe one framework's
    # code (scenario/frameworks.py, each value with its source); a key written here always wins. null: none.
    framework: Framework | None = None
    precision: Literal["fp32", "tf32", "fp16", "bf16", "fp8"] = "bf16"
    seq_len: pydantic.PositiveInt | None = None
    global_batch: pydantic.PositiveInt
    micro_batch: pydantic.PositiveInt = 1
    # adamw-8bit / paged-adamw-8bit: bitsandbytes' block-wise 8-bit Adam states (Dettmers et al.
    # 2022); paged: the states live in CUDA unified memory, evicted to host RAM under pressure.
    # none: no update step and no optimizer state (forward + backward only, as kernel benchmarks time it).
    optimizer: Literal["adamw", "adam", "sgd", "adamw-8bit", "paged-adamw-8bit", "none"] = "adamw"
    # What is trained: none = every weight (full training); lora = frozen 16-bit base plus low-rank
    # adapters (Hu et al. 2021); qlora = frozen 4-bit NF4 base plus adapters (Dettmers et al. 2023).
    finetune: Literal["none", "lora", "qlora"] = "none"
    lora: LoraSpec = LoraSpec()
    # Fine-tuning methods the fit search may propose (they change what is trained): [] proposes none.
    finetune_allowed: list[Literal["lora", "qlora"]] = []
    # Share of the need kept free by the plan searches (sweep --search, compare --search, run's fixes):
    # a plan qualifies when need x (1 + headroom) <= capacity. None: the memory model's measured error
    # (scalesim/costs/memory.py, MEMORY_MODEL_ERROR_FRACTION), so a chosen plan is not a coin toss.
    memory_headroom: float | None = pydantic.Field(default=None, ge=0.0, le=1.0)
    # selective: Megatron-LM's attention-core recompute; selective-op: torchtitan's per-op policy
    # (saves every other matmul output and attention, recomputes the rest; scalesim/costs/recompute.py).
    activation_checkpointing: Literal["none", "selective", "selective-op", "full"] = "none"
    # With full checkpointing: recompute only the first N transformer blocks of each pipeline chunk
    # and keep every activation of the rest (Megatron-LM --recompute-method block
    # --recompute-num-layers N; NeMo activations_checkpoint_method: block). None: every block.
    recompute_num_layers: pydantic.NonNegativeInt | None = None

    @pydantic.field_validator("recompute_num_layers")
    @classmethod
    def _partial_needs_full(cls, value: int | None, info: pydantic.ValidationInfo) -> int | None:
        if value is not None and info.data.get("activation_checkpointing") != "full":
            raise ValueError("Megatron's block recompute method limits full checkpointing; it needs "
                             "training.activation_checkpointing: full")
        return value
    # With selective checkpointing: the modules Megatron-Core recomputes (--recompute-modules;
    # scalesim/costs/recompute.py RECOMPUTE_MODULES). None: the attention core ("core_attn").
    recompute_modules: list[Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                    "shared_experts"]] | None = None

    @pydantic.field_validator("recompute_modules")
    @classmethod
    def _modules_need_selective(cls, value: list[str] | None, info: pydantic.ValidationInfo) -> list[str] | None:
        if value is not None and info.data.get("activation_checkpointing") != "selective":
            raise ValueError("Megatron's recompute modules are its selective recomputation; they need "
                             "training.activation_checkpointing: selective")
        if value is not None and info.data.get("finetune", "none") != "none":
            raise ValueError(f"recompute modules are modelled for full training, not with finetune: "
                             f"{info.data['finetune']} (allowed: null, selective then recomputes the attention core)")
        return value
    # How the loss is computed, which sets its memory peak (scalesim/costs/loss_memory.py): fused =
    # Megatron-LM's in-place vocab-parallel kernel; fp32-upcast = nanotron's sharded cross-entropy
    # on fp32 logits; eager = F.cross_entropy(logits.float()) (torchtitan); compiled = the same under
    # torch.compile (torchtitan's loss with --training.compile since mid-2025); loss-parallel = the
    # eager loss on vocab-sharded logits under torch's loss_parallel() (torchtitan with TP);
    # hf-causal-lm = Hugging Face's causal-LM loss, its fp32 logits kept in the model's output.
    cross_entropy: Literal["fused", "fp32-upcast", "eager", "compiled", "loss-parallel", "hf-causal-lm"] = "fused"
    # RMSNorm, rotary embedding and SwiGLU as fused kernels (Megatron-LM, Transformer Engine,
    # torch.compile) or as eager PyTorch model code runs them, one kernel per tensor op with fp32
    # intermediates (torchtitan without compile, Hugging Face; scalesim/costs/eager.py);
    # compiled-complex-rope = torch.compile of model code whose RoPE is complex-valued (torchtitan's
    # Llama): all fused but the RoPE, which Inductor leaves to eager kernels.
    # nanotron = its Llama block's eager SwiGLU and q/k/v layout copies (scalesim/costs/nanotron_kernels.py).
    elementwise_kernels: Literal["fused", "eager", "compiled-complex-rope", "nanotron"] = "fused"
    # Megatron-Core's apply_rope_fusion. false: multi-head latent attention's RoPE and its q/k/v
    # concatenations as eager kernels, as Megatron-Core ran MLA's YaRN RoPE before it could fuse it
    # (scalesim/costs/mla_rope.py); modelled for MLA models (DeepSeek) only.
    rope_fusion: bool = True
    # Whether a dense block's q, k, v (and gate, up) projections run as one GEMM each group (Megatron-Core,
    # Transformer Engine: linear_qkv, linear_fc1). false: as separate linears on one input, their data
    # gradients summed in backward (torchtitan's Llama: wq, wk, wv and w1, w3; scalesim/costs/projections.py).
    fused_projections: bool = True
    # What each transformer block keeps for backward, by the framework's model code
    # (scalesim/costs/memory.py, SAVED_ACTIVATIONS): megatron = Korthikanti et al. 2022's count;
    # nanotron = its Llama block, which also keeps the SiLU output and, without GQA, k and v twice.
    # transformer-engine = megatron, with fp8 linears keeping their fp8 input copies (precision fp8).
    saved_activations: Literal["megatron", "nanotron", "transformer-engine"] = "megatron"
    # auto: flash in 16-bit/fp8, naive in fp32/tf32. flash: a typical flash kernel for the GPU's
    # architecture; flash2 / flash3 name the kernel generation (FlashAttention-2, or -3 on Hopper;
    # scalesim/costs/compute.py, FLASH_KERNEL_EFFICIENCY). naive: scores materialised by separate eager
    # kernels (scale, mask, softmax, dropout); fused: materialised, with Megatron-LM's fused
    # scale+mask+softmax kernel (scalesim/costs/score_ops.py, SCORE_PASSES); te-unfused: Transformer Engine's
    # UnfusedDotProductAttention, fused plus the causal mask it builds on every call, its output copy and
    # backward's q/k gradient scaling (costs/te_unfused.py).
    # triton: the Triton FlashAttention of flash-attn v1 (llm-foundry's MPT `attn_impl: triton`; A100, H100).
    attention: Literal["auto", "flash", "flash2", "flash3", "triton", "naive", "fused", "te-unfused"] = "auto"
    # Activation layout of convolutions: nhwc (PyTorch channels_last, what NVIDIA's and MLPerf's
    # ResNets use) or nchw (PyTorch's default contiguous layout, which in 16-bit makes cuDNN
    # convert every conv's tensors; scalesim/costs/compute.py). Transformers are unaffected.
    memory_format: Literal["nhwc", "nchw"] = "nhwc"
    # Launch each layer's kernels as one CUDA graph (Megatron-LM / Transformer Engine graphed
    # layers, MLPerf-style) instead of one by one from eager PyTorch: the host's per-kernel
    # dispatch cost mostly disappears (scalesim/costs/host.py).
    cuda_graphs: bool = False
    # Whether the step reads the clipped gradient norm on the host before the update (Megatron-Core's
    # get_grad_norm_fp32 `.item()` at clip_grad > 0): the update's Python dispatches after the read are then
    # exposed (scalesim/costs/optimizer_tail.py). null: Megatron-Core's distributed optimizer (zero 1 or 2,
    # not nanotron's zero1_over_ddp) clips at its default 1.0; false for frameworks clipping on the device.
    grad_clip_host_sync: bool | None = None
    # The host waits for the GPU queue to drain once in every decoder layer's forward: Megatron-DeepSpeed (since
    # 2022) creates moe_loss and mlp_bias with torch.tensor(0.0, device=...) on every layer call, a blocking
    # copy (parallel/layer_sync.py). Megatron-LM's layer does not; set it for Megatron-DeepSpeed runs.
    layer_forward_host_sync: bool = False
    # The host waits for the GPU after every micro-batch's backward: HF Trainer's NaN/inf check of the loss
    # (logging_nan_inf_filter, on by default: `torch.isnan(loss) or torch.isinf(loss)`), on the last micro-batch
    # after the gradient reductions too (parallel/step_syncs.py). Set by training.framework: hf-trainer.
    loss_check_host_sync: bool = False
    # Attention in FP8 (Transformer Engine's FP8 dot-product attention; NeMo fp8_dot_product_attention,
    # FP8_DPA=1 in NVIDIA's MLPerf LoRA configs): the flash forward at cuDNN's measured FP8 rate
    # (scalesim/costs/flash.py); needs precision fp8, a flash kernel with an FP8 forward and a GPU with a
    # published rate (Hopper, Blackwell).
    fp8_attention: bool = False
    # Whose FP8 casts (precision fp8): transformer-engine = one cast pass per GEMM input, its scale from
    # earlier steps' amax; torchao-tensorwise = torchao's Float8Linear with dynamic tensorwise scaling
    # (torchtitan's float8 converter): each tensor cast in a pass of its own (its amax in the kernel that
    # produces it, as compiled), the output gradients cast too, and
    # the float8 all-gathered tensors transposed for the weight gradient (scalesim/costs/float8_casts.py).
    # transformer-engine-mxfp8 = TE's MXFP8BlockScaling: the GEMMs' own casts, the columnwise copy for the weight
    # gradient written by the cast on any GPU (scalesim/costs/fp8_grad_casts.py).
    # transformer-engine-current = TE's Float8CurrentScaling (NeMo / MLPerf FP8_RECIPE=tensorwise): as
    # transformer-engine, each tensor's amax computed in a pass of its own before its cast, except where a TE norm
    # writes it (scalesim/costs/fp8_current_scaling.py).
    fp8_recipe: Literal["transformer-engine", "torchao-tensorwise", "transformer-engine-mxfp8",
                        "transformer-engine-current"] = "transformer-engine"
    # With fp8_recipe transformer-engine-current: the kernels that write the amax of the tensor they produce, so its
    # cast needs no amax pass: norm = TE's LayerNorm/RMSNorm (not under NVTE_NORM_FWD_USE_CUDNN=1), activation = TE's
    # SwiGLU under the op fuser (USE_TE_OPS=True: linear_fc2's input, linear_fc1's output gradient)
    # (scalesim/costs/fp8_current_scaling.py).
    fp8_amax_fused: list[Literal["norm", "activation"]] = ["norm"]
    # Megatron-Core's activation_func_fp8_input_store (FP8_ACT=1 in NVIDIA's MLPerf LoRA configs): the fused
    # SwiGLU keeps its input (linear_fc1's output, 2 x ffn wide) in FP8 for backward, one byte an element
    # instead of two, at the cost of a cast kernel in forward and one back in backward
    # (scalesim/costs/fp8_act_store.py); needs precision fp8 and a dense SwiGLU model.
    fp8_activation_input_store: bool = False
    # Transformer Engine's op fuser (Megatron-Core / NeMo use_transformer_engine_op_fuser, USE_TE_OPS=1 in
    # NVIDIA's MLPerf v5.1 LoRA recipe): each LoRA linear's scale and add run in its adapter's and its base's
    # GEMMs, the adapted linear_qkv's norm writes its FP8 input, and the MLP's activation writes linear_fc2's
    # FP8 input and linear_fc1's FP8 gradient (scalesim/costs/te_ops.py); needs finetune lora with
    # lora.layout megatron (NeMo fuses the adapters at tensor parallelism 1 only).
    te_op_fuser: bool = False
    # Megatron-Core's fused_single_qkv_rope (FUSED_SINGLE_QKV_ROPE=1): one Transformer Engine kernel splits
    # linear_qkv's output into q, k, v and rotates q and k, one kernel back in backward (scalesim/costs/te_ops.py);
    # needs a RoPE model with a fused qkv projection and elementwise_kernels fused.
    fused_qkv_rope: bool = False

    @pydantic.field_validator("fp8_attention")
    @classmethod
    def _fp8_attention_in_fp8_flash(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        data = info.data
        # FlashAttention-2 has no FP8 kernel (FP8 forward came with FlashAttention-3, Shah et al. 2024)
        if value and (data.get("precision") != "fp8"
                      or data.get("attention") in ("naive", "fused", "te-unfused", "flash2", "triton")):
            raise ValueError("FP8 attention is Transformer Engine's fused flash kernel in an FP8 recipe: it needs "
                             "training.precision: fp8 and attention auto, flash or flash3 (FlashAttention-2, the Triton "
                             f"kernel, naive, fused and te-unfused have no FP8 kernel; got precision {data.get('precision')}, attention "
                             f"{data.get('attention')})")
        return value

    @pydantic.field_validator("fp8_recipe")
    @classmethod
    def _fp8_recipe_in_fp8(cls, value: str, info: pydantic.ValidationInfo) -> str:
        if value != "transformer-engine" and info.data.get("precision") != "fp8":
            raise ValueError(f"fp8_recipe {value} is how FP8 linears cast their tensors: it needs training.precision: "
                             f"fp8 (got {info.data.get('precision')}); allowed here: transformer-engine (the default)")
        return value

    @pydantic.field_validator("fp8_amax_fused")
    @classmethod
    def _amax_fused_in_current_scaling(cls, value: list[str], info: pydantic.ValidationInfo) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"fp8_amax_fused names each of norm, activation at most once; got {value!r}")
        if value != ["norm"] and info.data.get("fp8_recipe") != "transformer-engine-current":
            raise ValueError("fp8_amax_fused is which kernels write the amax under Transformer Engine's current scaling: "
                             f"it needs fp8_recipe: transformer-engine-current (got {info.data.get('fp8_recipe')}); "
                             "allowed here: [norm] (the default)")
        return value

    @pydantic.field_validator("fp8_activation_input_store")
    @classmethod
    def _act_store_in_fp8(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        if value and info.data.get("precision") != "fp8":
            raise ValueError("fp8_activation_input_store is Megatron-Core's FP8 copy of the SwiGLU input in an FP8 "
                             f"recipe: it needs training.precision: fp8 (got {info.data.get('precision')}); "
                             "allowed here: false")
        return value

    @pydantic.field_validator("rope_fusion")
    @classmethod
    def _rope_split_once(cls, value: bool, info: pydantic.ValidationInfo) -> bool:
        # eager / compiled-complex-rope already cut the one `rope` op into eager pieces (costs/eager.py), which
        # costs/mla_rope.py would each unfuse again; nanotron's RoPE is fused (and its models have no MLA)
        kernels = info.data.get("elementwise_kernels")
        if not value and kernels not in (None, "fused"):
            raise ValueError("rope_fusion: false runs multi-head latent attention's RoPE as Megatron-Core's eager "
                             "kernels (costs/mla_rope.py) and needs training.elementwise_kernels: fused (got "
                             f"{kernels}, which times the RoPE its own way); allowed here: true")
        return value
    # ResNet BatchNorm/ReLU/residual-add kernels: none = one pass each (torchvision, eager);
    # bn-relu = BatchNorm with its ReLU (and the block's last with the add) in one kernel;
    # normconv = BatchNorm folded into the convs, one scale-bias-add-ReLU pass per block
    # (NVIDIA's MLPerf MXNet ResNets; scalesim/models/conv_fusion.py). Other models: no effect.
    conv_fusion: Literal["none", "bn-relu", "normconv"] = "none"
    # The MLP's GELU computed in the up-projection GEMM's epilogue and its derivative in the backward
    # GEMM's (cuBLASLt GELU_AUX / DGELU epilogues; NVIDIA's MLPerf BERT --fused_gemm_gelu): no GELU
    # pass of its own (scalesim/costs/eager.py, gemm_gelu_model).
    fused_gemm_gelu: bool = False
    # Sequences packed into each seq_len row with block-diagonal attention (MLPerf BERT's
    # PACKING_FACTOR; scalesim/models/packing.py); 1 = one sequence per row.
    packed_sequences: pydantic.PositiveInt = 1
    # BERT: positions per sample the MLM head runs on (NVIDIA's --dense_seq_output: the masked
    # ones only, e.g. 76 of 512); None = every position (Hugging Face BertForPreTraining).
    mlm_positions: pydantic.PositiveInt | None = None
    # Mixture of experts: the busiest expert's routed tokens over the mean (>= 1); None takes the
    # router's published default (scalesim/parallel/experts.py, DEFAULT_IMBALANCE).
    moe_imbalance: float | None = pydantic.Field(None, ge=1.0)
    # Mixture of experts: token dropping with every expert's input padded to its capacity, capacity_factor
    # x the mean tokens per expert (Megatron-Core --moe-expert-capacity-factor with
    # --moe-pad-expert-input-to-capacity; NeMo's MegatronTokenDropCallback: 1.0); None: the model's
    # (dropless for the zoo's models). Overrides the model's moe.capacity_factor.
    moe_capacity_factor: float | None = pydantic.Field(None, ge=1.0)
    tokens: pydantic.PositiveFloat | None = None
    epochs: pydantic.PositiveFloat | None = None
    dataset_samples: pydantic.PositiveInt | None = None

    @pydantic.model_validator(mode="after")
    def _budget(self) -> "TrainingSpec":
        if self.tokens is not None and (self.epochs is not None or self.dataset_samples is not None):
            raise ValueError("give either tokens or epochs + dataset_samples, not both")
        if (self.epochs is None) != (self.dataset_samples is None):
            raise ValueError("epochs and dataset_samples go together")
        return self


def resolved_attention(training: "TrainingSpec") -> str:
    """flash or naive: `auto` means flash wherever flash kernels run (16-bit and fp8 training)."""
    if training.attention != "auto":
        return training.attention
    return "naive" if training.precision in ("fp32", "tf32") else "flash"
