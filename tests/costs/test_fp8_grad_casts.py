"""Transformer Engine's FP8 casts priced on the tensors it casts (costs/fp8_grad_casts.py): the input once in
forward, the output gradient once in backward, transposed copies only where FP8 GEMMs are TN-only and a weight
gradient is computed; a 16-bit run has none."""

from dataclasses import replace

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, fp8_cast_s, fp8_grad_cast_s, layer_time, streaming_bw_bytes_per_s
from scalesim.costs.fp8_grad_casts import backward_cast_bytes
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.models.spec import LayerSpec
from scalesim.models.transformer import gemm_op
from scalesim.parallel.sharding import shard_layer

B200, H100 = get_gpu("b200"), get_gpu("h100-sxm")


def _block(model="llama2-70b", seq=1024):
    return next(layer for layer in get_model(model, seq_len=seq).layers if layer.kind == "transformer_block")


def test_a_cast_moves_its_tensors_elements_times_read_plus_write_widths():
    fc1 = gemm_op("fc1", 1024, 2 * 28672, 8192)            # Llama 2 70B's SwiGLU fc1, 1,024 tokens
    m, n, k = fc1.gemm_mnk
    # Blackwell: the gradient read at 2 bytes, written once at 1 (both GEMMs read the same FP8 copy)
    assert backward_cast_bytes(fc1, True) == m * n * (2 + 1)
    # Hopper with a weight gradient: the gradient's transposed copy, and the input's the forward cast wrote
    assert backward_cast_bytes(fc1, False) == m * n * (2 + 1 + 1) + m * k * 1
    assert backward_cast_bytes(fc1, False, weight_gradient=False) == m * n * (2 + 1)
    stream = streaming_bw_bytes_per_s(B200)
    assert fp8_cast_s(fc1, B200, 1) == pytest.approx(m * k * (2 + 1) / stream + KERNEL_OVERHEAD_S)


def test_the_backward_cast_is_of_the_output_gradient_not_the_input():
    wide, narrow = gemm_op("up", 512, 4096, 1024), gemm_op("down", 512, 1024, 4096)   # same FLOP, n and k swapped
    assert fp8_cast_s(wide, B200, 1) < fp8_cast_s(narrow, B200, 1)                    # forward: its input
    assert fp8_grad_cast_s(wide, B200, 1) > fp8_grad_cast_s(narrow, B200, 1)          # backward: its output's gradient
    flat = replace(B200, gemm_k_overhead=0.0)       # backward GEMMs twice the forward's (no depth cost)
    for op in (wide, narrow):       # the layer's backward: twice the GEMM, one gradient cast, no input cast again
        layer = LayerSpec("l", "linear", 0, (op,), 0.0)
        fp8 = layer_time(layer, flat, "fp8", 1)
        gemm = fp8.forward_s - fp8_cast_s(op, flat, 1) - KERNEL_OVERHEAD_S
        assert fp8.backward_s == pytest.approx(2 * gemm + 2 * KERNEL_OVERHEAD_S + fp8_grad_cast_s(op, flat, 1))


def test_the_gated_fc1_casts_its_input_once_and_each_gradient_once():
    block = _block()
    ops = {op.name: op for op in block.ops}
    s, f, h = ops["mlp_gate"].gemm_mnk
    forward = sum(fp8_cast_s(ops[n], B200, 1) for n in ("mlp_gate", "mlp_up")) - KERNEL_OVERHEAD_S
    assert forward == pytest.approx(3 * s * h / streaming_bw_bytes_per_s(B200))
    backward = sum(backward_cast_bytes(ops[n], True) for n in ("mlp_gate", "mlp_up"))
    assert backward == 3 * s * 2 * f


def test_a_row_parallel_gradient_is_cast_on_its_sequence_shard():
    sp, plain = shard_layer(_block(), 8, 1, True), shard_layer(_block(), 8, 1, False)
    down_sp, down = (next(op for op in layer.ops if op.name == "mlp_down") for layer in (sp, plain))
    assert backward_cast_bytes(down_sp, True) == pytest.approx(backward_cast_bytes(down, True) / 8)
    qkv_sp, qkv = (next(op for op in layer.ops if op.name == "qkv") for layer in (sp, plain))
    assert backward_cast_bytes(qkv_sp, True) == backward_cast_bytes(qkv, True)   # its own columns


@pytest.mark.parametrize("gpu", [B200, H100])
def test_a_16_bit_run_has_no_cast_kernels(gpu):
    block = _block()
    uncast = replace(block, ops=tuple(replace(op, cast_share=0.0, grad_cast_share=0.0) for op in block.ops))
    assert layer_time(block, gpu, "bf16", 1) == layer_time(uncast, gpu, "bf16", 1)
    assert layer_time(block, gpu, "fp8", 1).backward_s > layer_time(uncast, gpu, "fp8", 1).backward_s


def test_mxfp8_writes_the_columnwise_copy_on_any_gpu_and_gathers_it():
    from scalesim.costs.fp8_grad_casts import mxfp8_model
    block = shard_layer(_block(), 8, 1, True)
    mx = mxfp8_model(replace(get_model("llama2-70b", seq_len=1024), layers=(block,))).layers[0]
    for te, op in zip(block.ops, mx.ops):
        if op.gemm_mnk is None:
            continue
        m, n, k = op.gemm_mnk
        # on a Blackwell part tensorwise FP8 writes one layout; MXFP8 writes both, 1 byte more an element of the
        # (shard of the) gradient and input it casts, with no transpose of the gathered tensor, and the gradient's
        # scales (a byte per 32 elements of each copy)
        extra = m * n * op.grad_cast_share * (1 + 2 / 32) + m * k * op.cast_share
        assert backward_cast_bytes(op, True) - backward_cast_bytes(te, True) == pytest.approx(extra)
        assert backward_cast_bytes(op, False) <= backward_cast_bytes(te, False) + m * n * op.grad_cast_share * 2 / 32


def test_a_routed_experts_gradient_is_cast_whole_under_sequence_parallelism():
    # Megatron-Core's expert linears run with TE's parallel_mode None (explicit_expert_comm): the dispatcher
    # all-gathers their output gradient in 16 bits, so TE casts all of it; the shared experts' TE row-parallel
    # linear casts its sequence shard as a dense MLP's does
    block = next(layer for layer in get_model("llama4-scout", seq_len=1024).layers
                 if any(op.name == "shared_down" for op in layer.ops))
    sp, plain = shard_layer(block, 4, 1, True), shard_layer(block, 4, 1, False)
    ops, flat = ({op.name: op for op in layer.ops} for layer in (sp, plain))
    assert backward_cast_bytes(ops["expert_down"], True) == backward_cast_bytes(flat["expert_down"], True)
    assert backward_cast_bytes(ops["shared_down"], True) == pytest.approx(backward_cast_bytes(flat["shared_down"], True) / 4)
