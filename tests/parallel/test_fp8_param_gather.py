"""fp8_param_gather (Megatron-Core --fp8-param-gather): the distributed optimizer's parameter
all-gathers carry the transformer blocks' weights at one byte each; embeddings stay 16-bit."""

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 32000,
                   "ffn": "swiglu", "ffn_hidden": 2816}, seq_len=1024)


def gathered_bytes(fp8_gather: bool, overlap: bool = True) -> dict[str, float]:
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), 1, 1, "fp8", "adamw", "none", "flash", zero=1,
                        overlap_param_gather=overlap, fp8_param_gather=fp8_gather)
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, plan).tasks[0]
    sizes = [t.plan.size_bytes for t in tasks if isinstance(t, CollectiveTask) and t.name == "zero all_gather"]
    return {"largest": max(sizes), "smallest": min(sizes), "total": sum(sizes)}


def test_block_weights_gather_at_one_byte_and_the_embedding_at_two():
    bf16, fp8 = gathered_bytes(False), gathered_bytes(True)
    blocks = [layer for layer in MODEL.layers if layer.kind == "transformer_block"]
    others = [layer for layer in MODEL.layers if layer.kind != "transformer_block" and layer.params]
    assert fp8["total"] == sum(b.params for b in blocks) + 2 * sum(o.params for o in others)
    assert bf16["total"] == 2 * sum(layer.params for layer in MODEL.layers)


def test_the_gather_after_the_optimizer_step_carries_fp8_block_weights_too():
    # Without overlap_param_gather ZeRO-1 gathers the updated parameters in one call after the
    # optimizer step; --fp8-param-gather gathers the FP8 weights there as well.
    bf16, fp8 = gathered_bytes(False, overlap=False), gathered_bytes(True, overlap=False)
    blocks = sum(layer.params for layer in MODEL.layers if layer.kind == "transformer_block")
    assert bf16["total"] == 2 * sum(layer.params for layer in MODEL.layers)
    assert fp8["total"] == bf16["total"] - blocks
    assert fp8["total"] == gathered_bytes(True)["total"]


def test_fp8_param_gather_without_fp8_training_is_an_input_error_naming_the_key():
    import pytest

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
