"""Adapter layouts (PEFT's one adapter per linear, Megatron's fused modules) and adapter dropout:
counts from the frameworks' module lists, and the physics (fewer, wider adapters do less work;
dropout is one more pass and one more mask, never less)."""

import pytest

from scalesim.costs.adapters import adapter_ops, adapter_shapes
from scalesim.costs.finetune import finetune_layer_time, finetune_memory, finetune_spec, trainable_params
from scalesim.costs.memory import model_boundary_bytes
from scalesim.hardware import get_gpu
from scalesim.models import get_model

H100 = get_gpu("h100-sxm")


def block_time(model, spec):
    t = finetune_layer_time(model.layers[1], H100, "bf16", 1, spec)
    return t.forward_s + t.backward_s


@pytest.mark.parametrize("targets,peft,megatron", [("attention", 4, 2), ("all-linear", 7, 4)])
def test_megatron_adapts_its_fused_modules_once(targets, peft, megatron):
    # NeMo's 'attention' is linear_qkv + linear_proj; all four of linear_qkv, linear_proj,
    # linear_fc1 (gate and up), linear_fc2 for every linear; PEFT wraps each nn.Linear.
    model = get_model("llama2-70b", seq_len=8192)
    block = model.layers[1]
    assert len(adapter_shapes(block, finetune_spec(model, "lora", 16, targets))) == peft
    assert len(adapter_shapes(block, finetune_spec(model, "lora", 16, targets, "megatron"))) == megatron


def test_fused_qkv_adapter_has_one_a_matrix_over_the_block_input():
    # One A (h x r) and one B (r x (h + 2 kv)) instead of three of each: r (h + h + 2 kv) trained,
    # against r (3h + h + 2 kv) for separate q, k, v adapters.
    model = get_model("llama2-70b", seq_len=8192)
    h, kv = 8192, 1024
    qkv = finetune_spec(model, "lora", 16, ["q", "k", "v"], "megatron")
    assert trainable_params(model.layers[1], qkv) == 16 * (h + h + 2 * kv)
    assert trainable_params(model.layers[1], finetune_spec(model, "lora", 16, ["q", "k", "v"])) == \
        16 * (3 * h + h + 2 * kv)


def test_fewer_fused_adapters_take_less_time():
    model = get_model("llama2-70b", seq_len=8192)
    assert block_time(model, finetune_spec(model, "lora", 16, "attention", "megatron")) < \
        block_time(model, finetune_spec(model, "lora", 16, "attention"))


def test_megatron_layout_on_a_gelu_mlp_adapts_the_up_projection_as_linear_fc1():
    model = get_model("gpt2-124m", seq_len=1024)
    names = [s[0] for s in adapter_shapes(model.layers[1], finetune_spec(model, "lora", 8, "all-linear", "megatron"))]
    assert names == ["qkv", "o", "up", "down"]


@pytest.mark.parametrize("layout", ["peft", "megatron"])
def test_dropout_is_one_more_kernel_each_way_and_costs_time(layout):
    model = get_model("llama2-7b", seq_len=2048)
    plain = finetune_spec(model, "lora", 16, "all-linear", layout)
    dropped = finetune_spec(model, "lora", 16, "all-linear", layout, dropout=0.1)
    shape = adapter_shapes(model.layers[1], plain)[0]
    (f0, b0), (f1, b1) = adapter_ops(shape, plain, 1), adapter_ops(shape, dropped, 1)
    assert (len(f1), len(b1)) == (len(f0) + 1, len(b0) + 1)
    assert block_time(model, dropped) > block_time(model, plain)


def test_dropout_keeps_its_mask_so_activations_grow_by_at_least_a_byte_per_input_element():
    model = get_model("llama2-7b", seq_len=2048)

    def activations(dropout):
        spec = finetune_spec(model, "lora", 16, "attention", "megatron", dropout)
        return finetune_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                               checkpointing="none", flash_attention=True,
                               boundary_bytes_per_sample=model_boundary_bytes(model), spec=spec).activations

    # linear_qkv's input (s x h) and linear_proj's (s x h): one mask byte per element, per block
    assert activations(0.1) - activations(0.0) >= 32 * 2 * 2048 * 4096


@pytest.mark.parametrize("targets", ["attention", "all-linear"])
def test_megatron_adapters_split_with_the_base_so_a_rank_does_1_over_tp_of_the_gemm_work(targets):
    # NeMo's ParallelLinearAdapter: both of its linear layers tensor-parallel, so a rank's
    # adapter GEMMs are 1/tp of the whole adapter's; PEFT-style local shapes would do more.
    from scalesim.parallel.sharding import shard_layer
    model = get_model("llama2-70b", seq_len=8192)
    whole = finetune_spec(model, "lora", 16, targets, "megatron", 0.1)
    split = finetune_spec(model, "lora", 16, targets, "megatron", 0.1, tp=4)

    def work(layer, spec):
        ops = [op for shape in adapter_shapes(layer, spec) for ops in adapter_ops(shape, spec, 1) for op in ops]
        return sum(op.flop for op in ops if op.kind == "gemm"), sum(op.elements_moved for op in ops
                                                                       if op.kind != "gemm"), len(ops)

    flop1, moved1, kernels1 = work(model.layers[1], whole)
    flop4, moved4, kernels4 = work(shard_layer(model.layers[1], 4, 1, True), split)
    assert flop4 == pytest.approx(flop1 / 4) and kernels4 == kernels1
    assert moved1 / 4 <= moved4 < moved1
