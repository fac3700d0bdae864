"""A block half's backward under sequence parallelism as Megatron-LM, Transformer Engine and nanotron run
it (parallel/sp_backward.py): the output gradient gathered, the input gathered again beside the first
GEMM's data gradient, the data gradient reduce-scattered beside its weight gradient."""

from dataclasses import replace

from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-h100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 4096, "heads": 32, "vocab": 1000,
                   "ffn": "swiglu", "ffn_hidden": 11008}, seq_len=4096)
BLOCKS = sum(1 for layer in MODEL.layers if layer.kind == "transformer_block")
TP = 4


def program(layout="seq-first", precision="bf16", sp=True):
    plan = ParallelPlan(Placement(tp=TP, cp=1, dp=1, pp=1), 1, 1, precision, "adamw", "none", "flash", sp_backward="split",
                        sequence_parallel=sp, sequence_parallel_layout=layout)
    return build_program(MODEL, DGX.gpu_spec, DGX, plan)


def tp_calls(prog):
    return [(i, t) for i, t in enumerate(prog.tasks[0]) if isinstance(t, CollectiveTask) and t.name.startswith("tp ")]


def backward_calls(prog):
    """The TP calls after the first backward compute task."""
    tasks = prog.tasks[0]
    start = next(i for i, t in enumerate(tasks) if isinstance(t, ComputeTask) and t.kind == "backward")
    return [(i, t) for i, t in tp_calls(prog) if i > start]


def test_each_half_gathers_its_input_again_for_the_weight_gradient():
    # Korthikanti et al. 2022, section 4.2.2: the first linear's input is kept sharded and all-gathered
    # again in backward; per half: the gradient's all-gather, the input's, the data gradient's reduce-scatter
    ops = [t.plan.op for _, t in backward_calls(program())]
    assert ops.count("all_gather") == 2 * 2 * BLOCKS and ops.count("reduce_scatter") == 2 * BLOCKS
    assert "all_reduce" not in ops
    # torch DTensor plans (batch-first) keep the gathered input: no gather again
    dtensor = [t.plan.op for _, t in backward_calls(program("batch-first"))]
    assert dtensor.count("all_gather") + dtensor.count("reduce_scatter") + 2 * dtensor.count("all_reduce") \
        == 2 * 2 * BLOCKS


def _regathers(prog):
    """(dgrad task, its half's input all-gather) pairs: the gather the weight-gradient GEMM waits for
    besides the data gradient."""
    tasks = prog.tasks[0]
    pairs = []
    for d, t in enumerate(tasks):
        if isinstance(t, ComputeTask) and t.name.endswith("first GEMM dgrad"):
            wgrad = next(i for i in range(d + 1, len(tasks)) if tasks[i].name.endswith("first GEMM wgrad"))
            again = [i for i in tasks[wgrad].deps if i != d]
            assert len(again) == 1 and tasks[again[0]].plan.op == "all_gather"
            pairs.append((d, again[0], wgrad))
    return pairs


def test_the_gather_runs_beside_the_data_gradient_and_the_scatter_beside_the_weight_gradient():
    tasks = program().tasks[0]
    pairs = _regathers(program())
    assert len(pairs) == 2 * BLOCKS
    for d, again, wgrad in pairs:
        assert again not in tasks[d].deps                      # the data gradient does not wait for it
        scatter = next(i for i in range(d + 1, wgrad) if isinstance(tasks[i], CollectiveTask))
        assert tasks[scatter].plan.op == "reduce_scatter" and scatter not in tasks[wgrad].deps


def test_overlapping_the_gather_is_faster_than_waiting_for_it():
    prog = program()
    waiting = dict(enumerate(prog.tasks[0]))
    for d, again, _ in _regathers(prog):
        waiting[d] = replace(waiting[d], deps=waiting[d].deps + (again,))
    blocked = replace(prog, tasks={0: tuple(waiting[i] for i in range(len(waiting)))})
    assert simulate(prog).end_s < simulate(blocked).end_s


def test_fp8_gathers_the_fp8_copy_of_the_input():
    # Transformer Engine gathers the input through its FP8 quantizer: one byte an element, the gradients two
    size = lambda prog: sorted({t.plan.size_bytes for _, t in backward_calls(prog)})     # noqa: E731
    assert size(program(precision="fp8")) == [size(program())[0] / 2, size(program())[0]]


def test_an_moe_block_gathers_its_attention_input_again():
    # the attention part's qkv linear is a sequence-parallel column linear; the experts' are not
    moe = get_model({"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 1000, "ffn": "swiglu",
                     "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048}}, seq_len=1024)
    plan = ParallelPlan(Placement(tp=2, cp=1, dp=4, pp=1, ep=4), 1, 1, "bf16", "adamw", "none", "flash", sp_backward="split",
                        sequence_parallel=True)
    tasks = build_program(moe, DGX.gpu_spec, DGX, plan).tasks[0]
    dgrads = [t for t in tasks if isinstance(t, ComputeTask) and t.name.endswith("first GEMM dgrad")]
    assert len(dgrads) == sum(1 for layer in moe.layers if layer.kind == "transformer_block")
    assert all(".0 " in t.name for t in dgrads)


def test_a_linear_that_kept_its_gathered_input_does_not_gather_it_again():
    # nanotron with tp_recompute_allgather: false saves the gathered input (costs/nanotron_memory.py)
    plan = ParallelPlan(Placement(tp=TP, cp=1, dp=1, pp=1), 1, 1, "bf16", "adamw", "none", "flash", sp_backward="split",
                        sequence_parallel=True, tp_saves_gathered_inputs=True)
    ops = [t.plan.op for _, t in backward_calls(build_program(MODEL, DGX.gpu_spec, DGX, plan))]
    assert ops.count("all_gather") == 2 * BLOCKS and ops.count("reduce_scatter") == 2 * BLOCKS


def test_the_split_backward_is_a_scenario_choice_and_a_bad_value_is_refused(tmp_path):
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from scalesim.cli import main
    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "scenarios" / "64xh100-llama3-70b.yaml").read_text())
    times = {}
    for choice in ("fused", "split", "both"):
        data["parallel"]["sequence_parallel_backward"] = choice
        path = tmp_path / f"{choice}.yaml"
        path.write_text(yaml.safe_dump(data))
        result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--json"])
        if choice == "both":
            assert result.exit_code == 2 and "Traceback" not in result.output
            assert "sequence_parallel_backward" in result.output and "split" in result.output
        else:
            assert result.exit_code == 0
            import json
            times[choice] = json.loads(result.output)["step_time_s"]
    assert times["split"] != times["fused"]
