"""fp8_param_gather (Megatron-Core --fp8-param-gather): the distributed optimizer's parameter
all-gathers carry the transformer blocks' GEMM weights at one byte each; their norm weights and the
embeddings stay 16-bit: each parameter in its own dtype, whole or in Megatron-Core's buckets."""

from dataclasses import replace

import pytest

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000,
                   "ffn": "swiglu", "ffn_hidden": 2816}, seq_len=1024)


def gathered_bytes(fp8_gather: bool, overlap: bool = True, bucket_params: int | None = None,
                   model=MODEL) -> dict[str, float]:
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), 1, 1, "fp8", "adamw", "none", "flash", zero=1,
                        overlap_param_gather=overlap, fp8_param_gather=fp8_gather, bucket_params=bucket_params)
    tasks = build_program(model, DGX.gpu_spec, DGX, plan).tasks[0]
    sizes = [t.plan.size_bytes for t in tasks if isinstance(t, CollectiveTask) and t.name == "zero all_gather"]
    return {"largest": max(sizes), "smallest": min(sizes), "total": sum(sizes), "sizes": sizes}


# Transformer Engine's FP8 parameters: its linears' weights (n x k of each GEMM's (m, n, k)), not the
# norms' weights (nor biases, none here)
FP8_WEIGHTS = sum(op.gemm_mnk[1] * op.gemm_mnk[2] * op.groups for layer in MODEL.layers
                  if layer.kind == "transformer_block" for op in layer.ops if op.kind == "gemm" and op.gemm_mnk)


@pytest.mark.parametrize("bucket_params", [None, 1, 3_000_000])
def test_block_gemm_weights_gather_at_one_byte_and_the_rest_at_two(bucket_params):
    # whole layers, a Megatron-Core bucket per tensor, or buckets of several tensors across layers
    bf16, fp8 = gathered_bytes(False, bucket_params=bucket_params), gathered_bytes(True, bucket_params=bucket_params)
    blocks = sum(layer.params for layer in MODEL.layers if layer.kind == "transformer_block")
    assert 0.9 * blocks < FP8_WEIGHTS < blocks              # the norms' weights are the rest
    assert fp8["total"] == pytest.approx(FP8_WEIGHTS + 2 * (MODEL.params - FP8_WEIGHTS), rel=1e-9)
    assert bf16["total"] == pytest.approx(2 * sum(layer.params for layer in MODEL.layers), rel=1e-9)


def test_with_a_bucket_per_tensor_each_gather_carries_its_own_tensor_in_its_own_dtype():
    # Megatron-Core keeps FP8 parameters in a uint8 buffer and the others in their dtype, each bucket gathered in
    # its buffer's (param_and_grad_buffer.py group_params_for_buffers, start_param_sync): at a bucket per tensor
    # each block gathers its norms' weights (hidden elements) at 2 bytes and its GEMM weights (n x k; Megatron's
    # fused gate/up linear_fc1 one tensor) at 1 byte, not every tensor at the block's mean bytes per parameter
    h, f = 1024, 2816
    block = (2 * h, 3 * h * h, h * h, 2 * h, 2 * f * h, f * h)     # norm, qkv, out, norm, gate+up, down (bytes)
    sizes = gathered_bytes(True, bucket_params=1)["sizes"]
    blocks = sum(layer.kind == "transformer_block" for layer in MODEL.layers)
    for size in set(block):
        assert sum(s == pytest.approx(size, rel=1e-9) for s in sizes) >= blocks * block.count(size)


def test_the_gather_after_the_optimizer_step_carries_fp8_block_weights_too():
    # Without overlap_param_gather ZeRO-1 gathers the updated parameters in one call after the
    # optimizer step; --fp8-param-gather gathers the FP8 weights there as well.
    bf16, fp8 = gathered_bytes(False, overlap=False), gathered_bytes(True, overlap=False)
    assert bf16["total"] == 2 * sum(layer.params for layer in MODEL.layers)
    assert fp8["total"] == pytest.approx(bf16["total"] - FP8_WEIGHTS, rel=1e-9)
    assert fp8["total"] == pytest.approx(gathered_bytes(True)["total"], rel=1e-9)


def test_fp8_param_gather_without_fp8_training_is_an_input_error_naming_the_key():
    from scalesim.app.setup import prepare
    from scalesim.errors import InputError
    from scalesim.scenario import Scenario

    scenario = Scenario.model_validate({
        "name": "bf16 with fp8 gathers", "cluster": {"node": "dgx-h100"}, "model": "gpt2-124m",
        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "micro_batch": 1},
        "parallel": {"dp": 8, "zero": 1, "fp8_param_gather": True}})
    with pytest.raises(InputError, match="training.precision: fp8") as error:
        prepare(scenario)
    assert error.value.key == "parallel.fp8_param_gather"


@pytest.mark.parametrize("bucket_params", [None, 1])
def test_a_block_without_norms_gathers_every_parameter(bucket_params):
    # a block whose GEMM weights leave a sliver (here its former norms' weights, ~0.02%: biases, say) and no
    # norm to hold it: that sliver is a 16-bit tensor of its own, not dropped from the gathers
    bare = replace(MODEL, layers=tuple(replace(layer, ops=tuple(op for op in layer.ops if op.kind != "norm"))
                                       if layer.kind == "transformer_block" else layer for layer in MODEL.layers))
    block = next(layer for layer in bare.layers if layer.kind == "transformer_block")
    weights = sum(op.gemm_mnk[1] * op.gemm_mnk[2] for op in block.ops if op.kind == "gemm" and op.gemm_mnk)
    assert 0 < block.params - weights < 0.01 * block.params
    fp8 = gathered_bytes(True, bucket_params=bucket_params, model=bare)
    assert fp8["total"] == pytest.approx(FP8_WEIGHTS + 2 * (bare.params - FP8_WEIGHTS), rel=1e-9)
