"""PyTorch FSDP's kernels around ZeRO-3's collectives (`parallel.fsdp_version`, scalesim/parallel/fsdp.py):
FSDP2 copies every gathered unit out and every gradient in; FSDP1 casts and pre-divides the gradients."""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.engine import simulate
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import build_cluster, load_node_design

ROOT = Path(__file__).resolve().parents[2]
DGX = build_cluster(load_node_design("dgx-a100"))
MODEL = get_model({"kind": "transformer", "layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000},
                  seq_len=1024)


def plan(fsdp=None, reduce="bf16", dp=8, prefetch="none", checkpointing="none", keep_last=False):
    return ParallelPlan(Placement(tp=1, cp=1, dp=dp, pp=1), 1, 2, "bf16", "adamw", checkpointing, "flash", zero=3,
                        grad_reduce_dtype=reduce, fsdp_version=fsdp, fsdp_backward_prefetch=prefetch,
                        fsdp_keep_last_block=keep_last)


def rank0(p):
    return build_program(MODEL, DGX.gpu_spec, DGX, p).tasks[0]


def named(tasks, prefix):
    return [t for t in tasks if t.name.startswith(prefix)]


def test_fsdp2_copies_out_every_gathered_unit_before_it_runs():
    tasks = rank0(plan(fsdp=2))
    gathers = [i for i, t in enumerate(tasks) if isinstance(t, CollectiveTask) and t.name.startswith("zero3 all_gather")]
    copies = [i for i, t in enumerate(tasks) if t.name == "fsdp all-gather copy-out"]
    assert len(copies) == len(gathers) > 0
    assert all(tasks[c].deps == (g,) for g, c in zip(gathers, copies))
    assert all(tasks[c].stream == "compute" for c in copies)


def test_each_version_adds_one_pass_before_every_reduce_scatter_and_none_without_fsdp():
    for fsdp, name in ((1, "fsdp gradient cast and pre-divide"), (2, "fsdp reduce-scatter copy-in")):
        tasks = rank0(plan(fsdp=fsdp))
        assert len(named(tasks, name)) == len(named(tasks, "grad reduce_scatter")) > 0
    assert not named(rank0(plan()), "fsdp")


def test_fsdp1_casts_only_when_the_reduction_is_wider_than_the_gradients():
    def cast_s(reduce):
        return sum(t.duration_s for t in named(rank0(plan(fsdp=1, reduce=reduce)), "fsdp gradient"))
    assert cast_s("fp32") > 2 * cast_s("bf16")        # fp32: the cast and a divide twice as wide


@pytest.mark.parametrize("fsdp", [1, 2])
def test_fsdps_own_kernels_never_make_a_step_faster(fsdp):
    plain = simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan())).end_s
    assert simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(fsdp=fsdp))).end_s > plain


def test_a_gathered_unit_copied_out_costs_time_in_proportion_to_its_bytes():
    small = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000}, seq_len=1024)
    def copy_s(model):
        tasks = build_program(model, DGX.gpu_spec, DGX, plan(fsdp=2)).tasks[0]
        return named(tasks, "fsdp all-gather copy-out")[1].duration_s      # the first block's (0: embedding)
    assert copy_s(MODEL) > 3 * copy_s(small)            # a block's weights grow as hidden squared


def test_fsdp1_concatenates_each_units_gradients_into_its_flat_gradient_on_the_compute_stream():
    # The parameters are autograd-tracked views (torch.split) of the FlatParameter: split's backward
    # concatenates their gradients into a new flat tensor before the post-backward hook casts and divides it.
    tasks = rank0(plan(fsdp=1))
    cats = [i for i, t in enumerate(tasks) if t.name == "fsdp1 flat gradient cat"]
    casts = [i for i, t in enumerate(tasks) if t.name == "fsdp gradient cast and pre-divide"]
    assert len(cats) == len(casts) == len(named(tasks, "grad reduce_scatter")) > 0
    assert all(tasks[c].stream == "compute" for c in cats)
    assert all(cat in tasks[cast].deps for cat, cast in zip(cats, casts))
    assert not named(rank0(plan(fsdp=2)), "fsdp1") and not named(rank0(plan()), "fsdp1")


def test_fsdp1s_gradient_cat_costs_time_in_proportion_to_the_units_gradient_bytes():
    small = get_model({"kind": "transformer", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000}, seq_len=1024)
    def cat_s(model):
        tasks = build_program(model, DGX.gpu_spec, DGX, plan(fsdp=1)).tasks[0]
        return next(t.duration_s for before, t in zip(tasks, tasks[1:])        # the last block's
                    if t.name == "fsdp1 flat gradient cat" and before.name.startswith("bwd block"))
    assert cat_s(MODEL) > 3 * cat_s(small)             # a block's gradient grows as hidden squared


def backward_order(tasks):
    """The backward's collectives in list order (the order they queue on the NCCL stream)."""
    first_backward = next(i for i, t in enumerate(tasks) if getattr(t, "kind", "") == "backward")
    last_forward = max(i for i, t in enumerate(tasks[:first_backward]) if getattr(t, "kind", "") == "forward")
    return [t.name.split()[1] for t in tasks[last_forward + 1:]
            if isinstance(t, CollectiveTask) and t.name.split()[0] in ("zero3", "grad")]


@pytest.mark.parametrize("prefetch", ["pre", "post"])
def test_backward_prefetch_queues_the_next_gather_ahead_of_this_units_reduce_scatter(prefetch):
    # FSDP1 BACKWARD_PRE/POST: the next unit's all-gather is issued in this unit's hooks, before its
    # reduce-scatter; without prefetch it waits behind it.
    # (without fsdp_version, so that every unit, the root's too, is gathered again in backward)
    ahead, behind = backward_order(rank0(plan(prefetch=prefetch))), backward_order(rank0(plan()))
    assert sorted(ahead) == sorted(behind)
    assert behind[:4] == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    assert ahead[:4] == ["all_gather", "all_gather", "reduce_scatter", "all_gather"]


def test_backward_prefetch_hides_gathers_and_is_never_slower():
    for checkpointing in ("none", "full"):
        times = {p: simulate(build_program(MODEL, DGX.gpu_spec, DGX, plan(fsdp=1, prefetch=p,
                                                                         checkpointing=checkpointing))).end_s
                 for p in ("none", "pre", "post")}
        assert times["pre"] < times["none"] and times["post"] < times["none"]


@pytest.mark.parametrize("parallel", [{"fsdp_version": 2}, {"zero": 1, "fsdp_version": 1}, {"zero": 3, "fsdp_version": 3},
                                      {"zero": 2, "fsdp_backward_prefetch": "pre"},
                                      {"zero": 3, "fsdp_backward_prefetch": "later"}])
def test_fsdp_version_without_full_sharding_is_refused_naming_the_key(tmp_path, parallel):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data.setdefault("parallel", {}).update(parallel)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("fsdp_version" if "fsdp_version" in parallel else "fsdp_backward_prefetch") in result.output


def test_searched_plans_keep_fsdp_only_where_they_shard_fully():
    # sweep --search and run's fixes try other ZeRO stages: each point must stay a valid scenario.
    from scalesim.app.plans import PlanPoint, scenario_for
    from scalesim.scenario import Scenario
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data["parallel"] = {"zero": 3, "fsdp_version": 2, "fsdp_backward_prefetch": "pre"}
    base = Scenario.model_validate(data)
    by_zero = {z: scenario_for(base, PlanPoint(8, 8, zero=z)).parallel for z in (0, 1, 3)}
    assert by_zero[3].fsdp_version == 2 and by_zero[3].fsdp_backward_prefetch == "pre"
    assert by_zero[0].fsdp_version is None and by_zero[1].fsdp_version is None
    assert by_zero[0].fsdp_backward_prefetch is None and by_zero[1].fsdp_backward_prefetch is None


def test_plain_zero3_prefetches_as_deepspeed_does_the_next_gather_ahead_of_the_reduce_scatter():
    # No fsdp_version: DeepSpeed ZeRO-3, whose pre-backward fetch prefetches the next parameters
    # (stage3_prefetch_bucket_size) before the unit's gradients are reduced; no implementation waits
    # for this unit's reduce-scatter before gathering the next unit.
    from scalesim.app.setup import prepare
    from scalesim.scenario import Scenario
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data["parallel"] = {"zero": 3}
    setup = prepare(Scenario.model_validate(data))
    assert setup.plan.fsdp_version is None and setup.plan.fsdp_backward_prefetch == "pre"
    order = backward_order(build_program(MODEL, DGX.gpu_spec, DGX, plan(prefetch=setup.plan.fsdp_backward_prefetch))
                           .tasks[0])
    assert order[:4] == ["all_gather", "all_gather", "reduce_scatter", "all_gather"]


def validation_scenarios(prefix):
    from scalesim.scenario import load_scenario
    return {p.name: load_scenario(p)[0] for p in sorted((ROOT / "validation" / "scenarios").glob(prefix + "*.yaml"))}


def test_torchtitan_runs_fsdp2_and_fsdp_qlora_fsdp1_on_every_fully_sharded_case():
    # torchtitan's apply_fsdp calls fully_shard (FSDP2) at every cited commit; AnswerDotAI's fsdp_qlora
    # train.py wraps the model in FullyShardedDataParallel (FSDP1).
    titan = validation_scenarios("torchtitan-")
    answer = {n: s for n, s in validation_scenarios("answerai-").items() if s.parallel.zero == 3}
    assert titan and answer
    assert all(s.parallel.zero == 3 and s.parallel.fsdp_version == 2 for s in titan.values())
    assert all(s.parallel.fsdp_version == 1 for s in answer.values())
    # runs whose source enables torchao's float8 FSDP all-gather gather their block weights in FP8
    folder = ROOT / "validation" / "scenarios"
    fp8_gathered = [n for n in titan if "float8 FSDP all-gather" in (folder / n).read_text().splitlines()[0]]
    assert fp8_gathered and all(titan[n].parallel.fp8_param_gather for n in fp8_gathered)


def test_a_torchtitan_step_copies_every_gathered_unit_out_as_fsdp2_does():
    from scalesim.app.setup import prepare
    from scalesim.scenario import load_scenario
    scenario, file = load_scenario(ROOT / "validation" / "scenarios" / "torchtitan-2412-llama3.1-8b-fsdp8-eager.yaml")
    setup = prepare(scenario.model_copy(update={"model": {"kind": "transformer", "layers": 2, "hidden": 1024,
                                                          "heads": 8, "vocab": 32000}}), file)
    tasks = build_program(setup.model, setup.gpu, setup.topology, setup.plan).tasks[0]
    gathers = [t for t in tasks if isinstance(t, CollectiveTask) and t.name.startswith("zero3 all_gather")]
    assert len(named(tasks, "fsdp all-gather copy-out")) == len(gathers) > 0
    assert len(named(tasks, "fsdp reduce-scatter copy-in")) == len(named(tasks, "grad reduce_scatter")) > 0


def gathers(p):
    return sum(isinstance(t, CollectiveTask) and t.name.startswith("zero3 all_gather") for t in rank0(p))


@pytest.mark.parametrize("fsdp", [1, 2])
@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_fsdp_keeps_the_root_gathered_for_backward_and_the_last_block_when_told(fsdp, checkpointing):
    # Neither FSDP reshards the root (embedding, final norm, head) after forward; torchtitan keeps the last
    # block too. DeepSpeed-style ZeRO-3 (no fsdp_version) gathers every unit again in each backward.
    root = sum(layer.kind != "transformer_block" for layer in MODEL.layers)
    every = plan(prefetch="pre", checkpointing=checkpointing)
    steps = every.micro_batches
    assert gathers(every) == 2 * steps * len(MODEL.layers)          # forward and backward, every unit
    kept = gathers(plan(fsdp=fsdp, prefetch="pre", checkpointing=checkpointing))
    assert kept == gathers(every) - steps * root
    assert gathers(plan(fsdp=fsdp, prefetch="pre", checkpointing=checkpointing, keep_last=True)) == kept - steps


def test_keeping_the_last_block_gathered_needs_fsdp(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "8xa100-ddp.yaml").read_text())
    data["parallel"] = {"zero": 3, "fsdp_keep_last_block": True}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output and "fsdp_keep_last_block" in result.output


@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_fsdp2_costs_no_more_than_its_own_copies_a_prefetched_gather_is_copied_out_when_its_unit_runs(checkpointing):
    # wait_for_unshard copies a unit out in its own pre-backward hook: the unit before it does not wait for
    # the prefetched all-gather, so FSDP2 adds at most its copy kernels' time to a step.
    deep = build_program(MODEL, DGX.gpu_spec, DGX, plan(prefetch="pre", checkpointing=checkpointing))
    fsdp2 = build_program(MODEL, DGX.gpu_spec, DGX, plan(fsdp=2, prefetch="pre", checkpointing=checkpointing))
    copies_s = sum(t.duration_s for t in named(fsdp2.tasks[0], "fsdp"))
    assert copies_s > 0
    assert simulate(fsdp2).end_s - simulate(deep).end_s <= copies_s
