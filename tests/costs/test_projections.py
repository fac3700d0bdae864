"""Separate q/k/v and gate/up projections on one input (costs/projections.py, torchtitan's Llama):
GEMMs at their own shapes and the data gradients' sums in backward."""

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.costs.compute import ELEMENT_BYTES, layer_time, op_time_s, streaming_bw_bytes_per_s
from scalesim.costs.gemm_depth import DATA_GRADIENT
from scalesim.costs.projections import GRAD_SUM_OPS, gemm_parts, with_separate_projections
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.parallel.sharding import shard_layer

H100 = get_gpu("h100-sxm")


def _block(fused=True, kernels="compiled-complex-rope", model="llama3-8b"):
    m = with_separate_projections(get_model(model, seq_len=8192), fused, kernels)
    return next(layer for layer in m.layers if layer.kind == "transformer_block")


def _op(layer, name):
    return next(op for op in layer.ops if op.name == name)


def test_fused_projections_leave_the_model_as_it_is():
    model = get_model("llama3-8b", seq_len=8192)
    assert with_separate_projections(model, True, "eager") is model


def test_q_k_v_run_as_three_gemms_of_the_heads_widths_and_split_with_tensor_parallelism():
    block = _block(False)
    heads_q = _op(block, "attn_out").gemm_mnk[2]             # 32 heads x 128
    qkv = _op(block, "qkv")
    kv = (qkv.gemm_mnk[1] - heads_q) // 2                    # 8 kv heads x 128
    assert [p.gemm_mnk[1] for p in gemm_parts(qkv)] == [heads_q, kv, kv]
    sharded = _op(shard_layer(block, 8, 1, True), "qkv")
    parts = gemm_parts(sharded)
    assert [p.gemm_mnk[1] for p in parts] == [heads_q // 8, kv // 8, kv // 8]
    assert sum(p.flop for p in parts) == pytest.approx(sharded.flop)


def test_gradient_sums_cover_the_whole_gathered_input_on_every_tp_rank():
    block = _block(False)
    s, h = _op(block, "qkv").gemm_mnk[0], _op(block, "qkv").gemm_mnk[2]
    sums = {op.name: op for op in block.ops if op.name in GRAD_SUM_OPS}
    assert set(sums) == set(GRAD_SUM_OPS) and all(op.backward_only for op in sums.values())
    # compiled: one kernel reads every gradient and writes the sum (q, k, v: 4 passes; w1, w3: 3)
    assert sums["grad_sum_qkv"].elements_moved == 4 * s * h and sums["grad_sum_mlp"].elements_moved == 3 * s * h
    sharded = {op.name: op for op in shard_layer(block, 8, 1, True).ops if op.name in GRAD_SUM_OPS}
    assert all(sharded[n].elements_moved == sums[n].elements_moved for n in GRAD_SUM_OPS)
    halved = {op.name: op for op in shard_layer(block, 1, 2, False).ops if op.name in GRAD_SUM_OPS}
    assert all(halved[n].elements_moved == sums[n].elements_moved / 2 for n in GRAD_SUM_OPS)
    # eager autograd adds pairwise: (q + k) + v, 3 passes each
    assert _op(_block(False, "eager"), "grad_sum_qkv").elements_moved == 6 * s * h


def test_separate_projections_cost_at_least_their_gradient_sums_in_backward():
    fused, separate = shard_layer(_block(True), 8, 1, True), shard_layer(_block(False), 8, 1, True)
    t_fused, t_sep = layer_time(fused, H100, "bf16", 12, "selective-op"), layer_time(separate, H100, "bf16", 12,
                                                                                     "selective-op")
    sums = [op for op in separate.ops if op.name in GRAD_SUM_OPS]
    floor = sum(op.elements_moved * 12 * ELEMENT_BYTES["bf16"] for op in sums) / streaming_bw_bytes_per_s(H100)
    assert t_sep.backward_s - t_fused.backward_s >= floor
    assert t_sep.forward_s >= t_fused.forward_s           # the input read three times, thin k and v GEMMs
    assert t_sep.recompute_s == pytest.approx(t_fused.recompute_s, rel=0.05)


def test_thin_k_and_v_gemms_run_below_the_fused_gemms_rate():
    sharded = _op(shard_layer(_block(False), 8, 1, True), "qkv")
    q, k, _ = gemm_parts(sharded)
    rate = [p.flop / op_time_s(p, H100, "bf16", 12) for p in (q, k)]
    assert rate[1] < rate[0]


def test_separate_projections_on_a_model_without_them_is_refused(tmp_path):
    data = {"name": "bad", "cluster": {"node": "dgx-a100", "gpus": 8}, "model": "resnet50",
            "training": {"precision": "bf16", "global_batch": 256, "fused_projections": False}, "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "training.fused_projections" in result.output and "Traceback" not in result.output


def test_a_given_data_gradient_depth_reaches_each_separate_gemm_as_its_own_width():
    # finetune.py prices a frozen GEMM's input gradient at depth n; q, k and v each reduce over their own
    # width (512, 128, 128 at TP 8), far below the fused n of 768: slower than at the forward's depth k
    b200 = get_gpu("b200")      # a measured gemm_k_overhead (Hopper's is 0)
    qkv = _op(shard_layer(_block(False), 8, 1, True), "qkv")
    assert b200.gemm_k_overhead > 0
    data_gradient = op_time_s(qkv, b200, "bf16", 12, depth=DATA_GRADIENT)
    assert data_gradient == pytest.approx(sum(op_time_s(p, b200, "bf16", 12, depth=p.gemm_mnk[1])
                                              for p in gemm_parts(qkv)))
    assert data_gradient > op_time_s(qkv, b200, "bf16", 12)
    # the weight gradient's depth (tokens) is every part's
    tokens = qkv.gemm_mnk[0] * 12
    assert op_time_s(qkv, b200, "bf16", 12, depth=tokens) == pytest.approx(
        sum(op_time_s(p, b200, "bf16", 12, depth=tokens) for p in gemm_parts(qkv)))


def test_a_weight_gradient_whose_depth_equals_the_fused_width_is_every_parts_depth():
    # tokens x micro-batch can equal the fused n (here 768 at TP 8): the weight gradient still reduces every
    # part over the tokens, not each over its own width (which is what the data gradient does)
    b200 = get_gpu("b200")
    qkv = _op(shard_layer(_block(False), 8, 1, True), "qkv")
    n = qkv.gemm_mnk[1]
    assert op_time_s(qkv, b200, "bf16", 1, depth=n) == pytest.approx(
        sum(op_time_s(p, b200, "bf16", 1, depth=n) for p in gemm_parts(qkv)))
    assert op_time_s(qkv, b200, "bf16", 1, depth=n) < op_time_s(qkv, b200, "bf16", 1, depth=DATA_GRADIENT)
