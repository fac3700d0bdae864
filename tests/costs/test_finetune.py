"""LoRA and QLoRA cost models: trainable counts in closed form and from PEFT, NF4 bytes from the
QLoRA paper, and the physics of frozen weights (less backward work, never more)."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import layer_time
from scalesim.costs.optimizer import optimizer_time_s
from scalesim.costs.finetune import (NF4_BITS_PER_WEIGHT, FinetuneSpec, finetune_layer_time, finetune_memory, finetune_spec,
                                     quantized_weights, stored_weight_bytes, trainable_params)
from scalesim.costs.memory import model_boundary_bytes, state_bytes_per_param, training_memory
from scalesim.hardware import get_gpu
from scalesim.models import get_model


def adapters(model, rank, targets):
    spec = finetune_spec(model, "lora", rank, targets)
    return sum(trainable_params(layer, spec) for layer in model.layers)


def closed_form(layers, h, kv_dim, f, rank, projections):
    """r (in + out) per adapted projection per block (Hu et al. 2021, sec. 4.1)."""
    shapes = {"q": (h, h), "k": (h, kv_dim), "v": (h, kv_dim), "o": (h, h), "gate": (h, f), "up": (h, f),
              "down": (f, h)}
    return layers * sum(rank * sum(shapes[p]) for p in projections)


ALL = ["q", "k", "v", "o", "gate", "up", "down"]


@pytest.mark.parametrize("name,layers,h,kv_dim,f", [("llama2-7b", 32, 4096, 4096, 11008),
                                                      ("llama3-8b", 32, 4096, 1024, 14336),
                                                      ("llama2-70b", 80, 8192, 1024, 28672)])
@pytest.mark.parametrize("rank,targets", [(8, ["q", "v"]), (16, "all-linear"), (64, ["q", "k", "v", "up"])])
def test_trainable_parameters_are_the_adapters_count_exactly(name, layers, h, kv_dim, f, rank, targets):
    projections = ALL if targets == "all-linear" else targets
    assert adapters(get_model(name, seq_len=512), rank, targets) == closed_form(layers, h, kv_dim, f, rank,
                                                                                 projections)


def test_trainable_parameters_match_what_peft_prints():
    # PEFT print_trainable_parameters(): Llama-2-7b r=8 on q_proj, v_proj "trainable params: 4,194,304";
    # r=16 on all linear layers "trainable params: 39,976,960"; Meta-Llama-3-8B r=16 all linear 41,943,040.
    assert adapters(get_model("llama2-7b", seq_len=512), 8, ["q", "v"]) == 4_194_304
    assert adapters(get_model("llama2-7b", seq_len=512), 16, "all-linear") == 39_976_960
    assert adapters(get_model("llama3-8b", seq_len=512), 16, "all-linear") == 41_943_040


def test_nf4_with_double_quantisation_costs_0_127_bits_of_constants():
    # Dettmers et al. 2023, sec. 3: 8/64 + 32/(64*256) = 0.127 bits per parameter.
    assert NF4_BITS_PER_WEIGHT - 4 == pytest.approx(0.127, abs=5e-4)


def test_qlora_weights_are_a_quarter_of_bf16_plus_the_constants():
    model = get_model("llama2-70b", seq_len=512)
    qlora = finetune_spec(model, "qlora", 16, "all-linear")
    blocks = [layer for layer in model.layers if layer.kind == "transformer_block"]
    nf4 = sum(stored_weight_bytes(layer, "bf16", qlora) for layer in blocks)
    bf16 = sum(stored_weight_bytes(layer, "bf16", None) for layer in blocks)
    assert nf4 / bf16 == pytest.approx((4 + 0.127) / 16, rel=0.01)
    # whole model: embedding and head stay 16-bit (bitsandbytes skips lm_head), so a little more
    whole = sum(stored_weight_bytes(layer, "bf16", qlora) for layer in model.layers) / (2.0 * model.params)
    assert 0.258 < whole < 0.28


def test_qlora_quantises_every_block_matrix_and_nothing_else():
    model = get_model("qwen2.5-7b", seq_len=512)
    block = model.layers[1]
    h, kv, f = 3584, 512, 18944
    assert quantized_weights(block) == h * (h + 2 * kv) + h * h + 3 * h * f     # biases and norms excluded
    assert quantized_weights(model.layers[0]) == 0 and quantized_weights(model.layers[-1]) == 0


@pytest.mark.parametrize("gpu", ["rtx4090", "a100-80gb-sxm", "h100-sxm"])
def test_frozen_weights_drop_the_weight_gradient_gemms_and_adapters_add_work(gpu):
    g = get_gpu(gpu)
    model = get_model("llama2-7b", seq_len=2048)
    block = model.layers[1]
    full = layer_time(block, g, "bf16", 2)
    frozen = finetune_layer_time(block, g, "bf16", 2, FinetuneSpec("lora", 16, ()))   # no adapters at all
    assert frozen.forward_s == pytest.approx(full.forward_s)
    # The GEMMs' backward halves (input gradient only); attention and element-wise backward stay.
    gemm_forward = full.matmul_forward_s - sum(layer_time(replace(block, ops=(op,)), g, "bf16", 2).forward_s
                                               for op in block.ops if op.kind == "attention")
    assert full.backward_s - frozen.backward_s == pytest.approx(gemm_forward, rel=0.01)
    lora = finetune_layer_time(block, g, "bf16", 2, finetune_spec(model, "lora", 16, "all-linear"))
    assert lora.forward_s > frozen.forward_s and lora.backward_s > frozen.backward_s
    assert lora.forward_flop > full.forward_flop


def test_qlora_pays_a_dequantisation_per_pass_on_the_memory_roofline():
    model = get_model("llama2-7b", seq_len=2048)
    block = model.layers[1]
    lora, qlora = (finetune_spec(model, m, 16, "all-linear") for m in ("lora", "qlora"))
    slow, fast = get_gpu("rtx4090"), get_gpu("h100-sxm")      # ~1 TB/s vs ~3.35 TB/s of DRAM
    extra = {g.name: finetune_layer_time(block, g, "bf16", 1, qlora).forward_s
             - finetune_layer_time(block, g, "bf16", 1, lora).forward_s for g in (slow, fast)}
    assert extra[slow.name] > extra[fast.name] > 0


def test_8bit_adam_holds_and_streams_fewer_bytes():
    _, _, adamw = state_bytes_per_param("bf16", "adamw")
    _, _, eight = state_bytes_per_param("bf16", "adamw-8bit")
    # Dettmers et al. 2022: two 8-bit moments instead of two fp32 ones; the fp32 master stays.
    assert adamw - eight == pytest.approx(8 - 2, abs=0.01)
    assert state_bytes_per_param("bf16", "paged-adamw-8bit") == state_bytes_per_param("bf16", "adamw-8bit")
    gpu = get_gpu("rtx4090")
    assert optimizer_time_s(1e9, gpu, "bf16", "adamw-8bit") < optimizer_time_s(1e9, gpu, "bf16", "adamw")


def memory(model, spec, **kw):
    args = dict(micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw", checkpointing="full",
                flash_attention=True, boundary_bytes_per_sample=model_boundary_bytes(model))
    return finetune_memory(model.layers, spec=spec, **{**args, **kw})


def test_frozen_base_has_no_gradients_or_optimizer_state_beyond_the_adapters():
    model = get_model("llama2-7b", seq_len=2048)
    spec = finetune_spec(model, "lora", 16, "all-linear")
    lora = memory(model, spec)
    trained = 39_976_960
    _, g, o = state_bytes_per_param("bf16", "adamw")
    assert lora.gradients == trained * g and lora.optimizer == trained * o
    full = training_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                           checkpointing="full", flash_attention=True,
                           boundary_bytes_per_sample=model_boundary_bytes(model))
    assert lora.total < full.total / 2


def test_sharding_and_offloading_the_base_only_ever_lower_weight_memory():
    model = get_model("llama2-70b", seq_len=2048)
    spec = finetune_spec(model, "qlora", 16, "all-linear")
    alone = memory(model, spec).weights
    sharded = [memory(model, spec, zero=3, shards=n).weights for n in (2, 4, 8)]
    offloaded = memory(model, spec, zero=3, shards=2, offload_params=True).weights
    assert alone > sharded[0] > sharded[1] > sharded[2] > offloaded


def test_fp8_lora_keeps_frozen_matrices_in_one_byte():
    # Transformer Engine fp8_model_init / NeMo fp8_params: a frozen matrix only feeds FP8 GEMMs.
    model = get_model("llama2-70b", seq_len=512)
    block = model.layers[1]
    spec = finetune_spec(model, "lora", 16, "attention")
    assert stored_weight_bytes(block, "fp8", spec) == quantized_weights(block) + 2 * (block.params
                                                                                      - quantized_weights(block))
    assert stored_weight_bytes(block, "bf16", spec) == 2 * block.params


def test_fused_modules_get_one_adapter_each():
    # Phi-3's checkpoint fuses q, k, v (qkv_proj) and gate, up (gate_up_proj): PEFT adapts each as one
    # linear layer, r (in + out) with the fused widths (config: h 3072, f 8192, 32 layers, MHA).
    model = get_model("phi-3-mini", seq_len=512)
    h, f = 3072, 8192
    per_block = 16 * ((h + 3 * h) + (h + h) + (h + 2 * f) + (f + h))
    assert adapters(model, 16, "all-linear") == 32 * per_block
    assert adapters(model, 16, ["q"]) == adapters(model, 16, ["q", "k", "v"]) == 32 * 16 * (h + 3 * h)


def _activations(model, spec, checkpointing="none"):
    return finetune_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                           checkpointing=checkpointing, flash_attention=True,
                           boundary_bytes_per_sample=model_boundary_bytes(model), spec=spec).activations


def test_frozen_gemms_keep_no_input_so_a_frozen_mlp_keeps_less():
    # Transformer Engine's Linear keeps its input only if weight.requires_grad; PyTorch's autograd
    # keeps mm's input only for the weight's gradient (gen_variable_type.py guard_for).
    model = get_model("llama2-7b", seq_len=2048)
    s, h, f, r, blocks = 2048, 4096, 11008, 16, 32
    acts = {name: _activations(model, finetune_spec(model, "lora", r, targets))
            for name, targets in (("qv", ["q", "v"]), ("attention", "attention"), ("all", "all-linear"))}
    full = training_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                           checkpointing="none", flash_attention=True,
                           boundary_bytes_per_sample=model_boundary_bytes(model)).activations
    x_a = 2 * s * r                                   # one adapter's x A per block, 16-bit
    # a frozen MLP keeps neither its input (2sh) nor the down projection's input (2sf)
    assert acts["all"] - acts["attention"] == pytest.approx(blocks * (2 * s * h + 2 * s * f + 3 * x_a))
    # q, v or all four attention projections: the qkv input stays either way
    assert acts["attention"] - acts["qv"] == pytest.approx(blocks * 2 * x_a)
    assert acts["all"] == pytest.approx(full + blocks * 7 * x_a)


def test_qlora_keeps_what_full_checkpointing_keeps_and_frozen_inputs_change_nothing_there():
    model = get_model("llama2-7b", seq_len=2048)
    lora = finetune_spec(model, "lora", 16, "attention")
    qlora = finetune_spec(model, "qlora", 16, "attention")
    assert _activations(model, qlora) > _activations(model, lora)     # bitsandbytes' matmul: not taken off
    # under full checkpointing blocks keep only their input: the frozen-input saving is one block's worth
    gap = _activations(model, qlora, "full") - _activations(model, lora, "full")
    assert 0 <= gap <= 2 * 2048 * (4096 + 11008)
