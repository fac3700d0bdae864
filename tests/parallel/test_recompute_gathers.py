"""Per-op selective checkpointing (torchtitan) with sequence parallelism gathers each block half's
input again in backward: its policy saves reduce-scatters but not all-gathers."""

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 8, "vocab": 1000,
                   "ffn": "swiglu", "ffn_hidden": 2816}, seq_len=1024)


def gathers(checkpointing: str, sp: bool) -> int:
    plan = ParallelPlan(Placement(tp=2, cp=1, dp=1, pp=1), 1, 1, "bf16", "adamw", checkpointing, "flash",
                        sequence_parallel=sp)
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, plan).tasks[0]
    return sum(1 for t in tasks if isinstance(t, CollectiveTask) and t.plan.op == "all_gather")


def test_per_op_checkpointing_adds_two_gathers_per_block_under_sequence_parallelism():
    blocks = sum(1 for layer in MODEL.layers if layer.kind == "transformer_block")
    assert gathers("selective-op", True) == gathers("none", True) + 2 * blocks


def test_nothing_to_gather_again_without_sequence_parallelism_or_with_megatron_selective():
    assert gathers("selective-op", False) == gathers("none", False)
    assert gathers("selective", True) == gathers("none", True)
