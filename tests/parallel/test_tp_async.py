"""nanotron's async TP linears (parallel/tp_async.py, sp_backward.py): the sequence-parallel all-gathers run
beside the GEMM of the rows a rank already holds."""

import pytest

from scalesim.engine import simulate
from scalesim.errors import InputError
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.schema import validate
from scalesim.scenario import ParallelSpec
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 3072, "heads": 32, "vocab": 1000,
                   "ffn": "swiglu", "ffn_hidden": 8192}, seq_len=4096)
BLOCKS = sum(1 for layer in MODEL.layers if layer.kind == "transformer_block")


def program(asynchronous: bool):
    plan = ParallelPlan(Placement(tp=4, cp=1, dp=1, pp=1), 2, 2, "bf16", "adamw", "none", "flash", sp_backward="split",
                        sequence_parallel=True, tp_async=asynchronous)
    return build_program(MODEL, DGX.gpu_spec, DGX, plan)


def test_the_local_rows_are_multiplied_while_the_rest_is_gathered():
    tasks = program(True).tasks[0]
    local = [i for i, t in enumerate(tasks) if isinstance(t, ComputeTask)
             and t.name.endswith(("first GEMM, local rows", "last GEMM dgrad, local shard"))]
    assert len(local) == 2 * 2 * 2 * BLOCKS           # per half, forward and backward, 2 micro-batches
    for i in local:
        after = next(j for j in range(i + 1, len(tasks)) if i in tasks[j].deps)
        gather = [d for d in tasks[after].deps if d != i]
        assert len(gather) == 1 and tasks[gather[0]].plan.op == "all_gather"
        assert gather[0] not in tasks[i].deps         # the local GEMM does not wait for the gather


def test_the_same_calls_and_work_take_less_time():
    blocking, asynchronous = program(False), program(True)
    calls = lambda p: sorted((t.plan.op, t.plan.size_bytes) for t in p.tasks[0] if isinstance(t, CollectiveTask))  # noqa: E731
    work = lambda p: sum(t.duration_s for t in p.tasks[0] if isinstance(t, ComputeTask))                            # noqa: E731
    assert calls(asynchronous) == calls(blocking)
    assert work(asynchronous) == pytest.approx(work(blocking), rel=1e-9)
    assert simulate(asynchronous).end_s < simulate(blocking).end_s


def test_async_linears_need_megatron_style_sequence_parallelism():
    with pytest.raises(InputError, match="tp_linear_async_communication"):
        validate(ParallelSpec, {"tp": 4, "tp_linear_async_communication": True})
    with pytest.raises(InputError, match="seq-first"):
        validate(ParallelSpec, {"tp": 4, "sequence_parallel": True, "sequence_parallel_layout": "batch-first",
                                "tp_linear_async_communication": True})
    assert validate(ParallelSpec, {"tp": 4, "sequence_parallel": True,
                                   "tp_linear_async_communication": True}).tp_linear_async_communication
