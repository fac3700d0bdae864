"""Framework keys that only mean something with some plans (review9): each is refused, with one message
naming the key, where it would be ignored or misapplied, and the plan searches and run's fixes reset
them where the plan they try no longer takes them; and what the session's keys do beside context
parallelism (gathered inputs) and ZeRO-3 (gradient accumulation)."""

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.fitting import _also_reset, _keys_that_go_with
from scalesim.app.plans import PlanPoint, scenario_for
from scalesim.app.setup import prepare
from scalesim.cli import main
from scalesim.scenario import Scenario

BASE = {"name": "plan keys", "cluster": {"node": "dgx-h100", "nodes": 1}, "model": "gpt2-350m",
        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 16, "micro_batch": 2,
                     "activation_checkpointing": "none"},
        "parallel": {"tp": 2, "pp": 2, "dp": 2}}


def run_with(tmp_path, **parallel):
    data = {**BASE, "parallel": {**BASE["parallel"], **parallel}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return CliRunner().invoke(main, ["run", str(path), "--no-plots"])


@pytest.mark.parametrize("parallel, key", [
    # ZeRO-3 gathers before every forward already: the optimizer-step gathers would be a second set
    ({"zero": 3, "overlap_param_gather": True, "param_gather_with_optimizer_step": True},
     "param_gather_with_optimizer_step"),
    # without overlap_param_gather nothing is gathered in the forward: the key would be ignored
    ({"zero": 1, "param_gather_with_optimizer_step": True}, "param_gather_with_optimizer_step"),
    # Megatron-LM asserts interleaved pipeline parallelism (arguments.py validate_args): not at 1F1B, nor
    # at one virtual stage (its virtual_pipeline_model_parallel_size is then None)
    ({"zero": 1, "overlap_param_gather": True, "param_gather_with_optimizer_step": True},
     "param_gather_with_optimizer_step"),
    ({"zero": 1, "overlap_param_gather": True, "param_gather_with_optimizer_step": True,
      "pp_schedule": "interleaved", "virtual_stages": 1}, "param_gather_with_optimizer_step"),
    # Megatron-Core aligns only the distributed optimizer's overlapped gathers
    ({"zero": 1, "align_param_gather": True}, "align_param_gather"),
    ({"zero": 3, "overlap_param_gather": True, "align_param_gather": True}, "align_param_gather"),
    # torchtitan keeps the last block gathered only without PP (with PP it reshards no block after forward,
    # parallelize_llama.py apply_fsdp): scalesim's fsdp.py regathered applies the key at pp 1 only
    ({"zero": 3, "fsdp_version": 2, "fsdp_keep_last_block": True}, "fsdp_keep_last_block"),
    # GPipe's P2P is never batched: the tensor would be sent in 1/tp shares that nobody gathers
    ({"pp_schedule": "gpipe", "overlap_p2p_comm": False, "pp_scatter_gather": True}, "pp_scatter_gather"),
    # ZeRO-3 reduces unit by unit: Megatron-Core's DP buckets and their NaN check would be ignored
    ({"zero": 3, "bucket_params": 1000}, "bucket_params"),
    ({"zero": 3, "grad_nan_check": True}, "grad_nan_check"),
    # TE's userbuffers re-gather the input whatever the memory model is told
    ({"sequence_parallel": True, "tp_comm_overlap": True, "tp_recompute_allgather": False}, "tp_recompute_allgather"),
])
def test_a_key_the_plan_would_ignore_or_misapply_is_refused_with_one_message(tmp_path, parallel, key):
    result = run_with(tmp_path, **parallel)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"parallel.{key}" in result.output and "allowed" in result.output


def test_the_same_keys_on_the_plans_they_belong_to_run(tmp_path):
    assert run_with(tmp_path, zero=1, overlap_param_gather=True, param_gather_with_optimizer_step=True,
                    pp_schedule="interleaved", virtual_stages=2).exit_code == 0
    assert run_with(tmp_path, zero=1, overlap_param_gather=True, align_param_gather=True).exit_code == 0
    assert run_with(tmp_path, overlap_p2p_comm=False, pp_scatter_gather=True).exit_code == 0


def test_searched_plans_reset_keys_their_zero_stage_tp_or_schedule_does_not_take():
    data = {**BASE, "parallel": {"tp": 2, "pp": 2, "dp": 2, "zero": 1, "overlap_param_gather": True,
                                 "param_gather_with_optimizer_step": True, "align_param_gather": True,
                                 "pp_schedule": "interleaved", "virtual_stages": 2, "sequence_parallel": True,
                                 "tp_recompute_allgather": False}}
    base = Scenario.model_validate(data)
    prepare(base)
    for point in (PlanPoint(8, 2, tp=2, pp=2, zero=3), PlanPoint(8, 4, tp=1, pp=2, zero=1),
                  PlanPoint(8, 4, tp=1, pp=2, zero=0), PlanPoint(8, 4, tp=2, pp=1, zero=1)):
        scenario = scenario_for(base, point)
        prepare(scenario)           # a valid plan, not a refused one
        par = scenario.parallel
        assert par.align_param_gather == (point.zero in (1, 2))
        # the optimizer-step gathers need virtual stages too: pp 1 runs 1F1B
        assert par.param_gather_with_optimizer_step == (point.zero in (1, 2) and point.pp > 1)
        assert par.tp_recompute_allgather == (point.tp == 1 or base.parallel.tp_recompute_allgather)
    kept = scenario_for(base, PlanPoint(8, 2, tp=2, pp=2, zero=1)).parallel
    assert kept.param_gather_with_optimizer_step and not kept.tp_recompute_allgather


def test_searched_plans_reset_keeping_the_last_fsdp_block_where_they_add_a_pipeline():
    data = {**BASE, "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": 3, "fsdp_version": 2,
                                 "fsdp_keep_last_block": True}}
    base = Scenario.model_validate(data)
    prepare(base)
    for point in (PlanPoint(8, 8, tp=1, pp=1, zero=3), PlanPoint(8, 4, tp=1, pp=2, zero=3),
                  PlanPoint(8, 4, tp=2, pp=1, zero=3)):
        scenario = scenario_for(base, point)
        prepare(scenario)           # a valid plan, not a refused one
        assert scenario.parallel.fsdp_keep_last_block == (point.pp == 1)


def test_runs_fixes_reset_the_keys_a_higher_zero_stage_does_not_take():
    data = {**BASE, "parallel": {"tp": 1, "pp": 2, "dp": 4, "zero": 1, "overlap_param_gather": True,
                                 "param_gather_with_optimizer_step": True, "pp_schedule": "interleaved",
                                 "virtual_stages": 2}}
    base = Scenario.model_validate(data)
    setup = prepare(base)
    changed = base.with_changes(**_keys_that_go_with(setup, {"parallel": {"zero": 3}}))
    prepare(changed)
    assert changed.parallel.zero == 3 and not changed.parallel.param_gather_with_optimizer_step
    nan_checked = base.with_changes(parallel={"bucket_params": 1000, "grad_nan_check": True})
    changed = nan_checked.with_changes(**_keys_that_go_with(prepare(nan_checked), {"parallel": {"zero": 3}}))
    prepare(changed)
    assert changed.parallel.bucket_params is None and not changed.parallel.grad_nan_check
    same = base.with_changes(**_keys_that_go_with(setup, {"parallel": {"zero": 2}}))
    assert same.parallel.param_gather_with_optimizer_step


def test_runs_fixes_run_the_interleaved_schedule_as_1f1b_where_the_changed_split_cannot_fill_it():
    # run's more-GPUs fix halves the micro-batches per replica here (dp 2 -> 4, global_batch 4, micro-batch 1):
    # one micro-batch is not a multiple of pp 2, which the interleaved schedule needs. As plan searches do
    # (plans.py schedule_for), the fix runs 1F1B, and the optimizer-step gathers that need virtual stages go
    data = {**BASE, "cluster": {"node": "dgx-h100", "gpus": 4},
            "training": {**BASE["training"], "global_batch": 4, "micro_batch": 1},
            "parallel": {"tp": 1, "pp": 2, "zero": 1, "overlap_param_gather": True,
                         "param_gather_with_optimizer_step": True, "pp_schedule": "interleaved", "virtual_stages": 2}}
    setup = prepare(Scenario.model_validate(data))
    more = {"cluster": {"gpus": 8}, "parallel": {"zero": 2}, "training": {"micro_batch": 1, "global_batch": 4}}
    changed = prepare(setup.scenario.with_changes(**_keys_that_go_with(setup, more)))
    assert changed.gpus == 8 and changed.plan.schedule == "1f1b" and changed.plan.chunks_per_stage == 1
    assert not changed.plan.param_gather_with_optimizer_step
    assert "parallel.pp_schedule: 1f1b" in _also_reset(setup, more)
    # a change the interleaved schedule still fills keeps it, and the gathers with it
    kept = prepare(setup.scenario.with_changes(**_keys_that_go_with(setup, {"parallel": {"zero": 2}})))
    assert kept.plan.chunks_per_stage == 2 and kept.plan.param_gather_with_optimizer_step


def test_run_of_a_plan_that_saves_gathered_inputs_has_its_one_gpu_baseline(tmp_path):
    # run's scaling efficiency prepares the plan on one GPU (tp 1, no sequence parallelism): the
    # key that goes with sequence parallelism must not refuse the whole run there
    result = run_with(tmp_path, sequence_parallel=True, tp_recompute_allgather=False)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("overlap, key, says", [
    ({"qkv_dgrad_sms": 0}, "parallel.tp_comm_overlap.qkv_dgrad_sms", "greater than 0"),
    ({"fc1_dgrad_smz": 8}, "parallel.tp_comm_overlap.fc1_dgrad_smz", "Did you mean 'fc1_dgrad_sms'"),
    ("often", "parallel.tp_comm_overlap", "valid boolean"),
])
def test_a_bad_key_inside_a_union_value_is_named_not_the_unions_bool_branch(tmp_path, overlap, key, says):
    # tp_comm_overlap is `bool | TpCommOverlapSpec`: every branch fails, and the message must be the
    # mapping's own (its key and what it allows), not "tp_comm_overlap.bool: Input should be a valid boolean"
    result = run_with(tmp_path, sequence_parallel=True, tp_comm_overlap=overlap)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"key '{key}'" in result.output and says in result.output and ".bool" not in result.output


def test_gathered_inputs_kept_under_context_parallelism_are_the_ranks_share_of_the_sequence():
    # With cp the sequence is split before TP gathers it: a column linear that keeps its gathered input
    # keeps s/cp tokens, so the extra memory per rank halves from cp 1 to cp 2 (same tp, same micro-batch).
    def extra(cp: int) -> float:
        par = {"tp": 2, "pp": 1, "cp": cp, "dp": 4 // cp, "sequence_parallel": True}
        base = {**BASE, "model": "llama3-8b", "training": {**BASE["training"], "seq_len": 2048}}
        setups = [prepare(Scenario.model_validate({**base, "parallel": {**par, "tp_recompute_allgather": keep}}))
                  for keep in (True, False)]
        return setups[1].step.first_stage_memory.live - setups[0].step.first_stage_memory.live
    assert extra(1) > 0
    assert extra(2) == pytest.approx(extra(1) / 2, rel=1e-6)


@pytest.mark.parametrize("mode", ["fp32-add", "autograd-add"])
def test_under_zero3_each_micro_batch_adds_only_the_ranks_gradient_shard(mode):
    # ZeRO-3 reduce-scatters every micro-batch's gradients (rank_program.py _reduce_layer): the
    # accumulation that follows adds the rank's 1/dp shard, as FSDP's sharded-grad accumulation does
    from scalesim.parallel import ParallelPlan, Placement, build_program
    from scalesim.program import ComputeTask
    from scalesim.topology import build_cluster, load_node_design
    from scalesim.models import get_model
    dgx = build_cluster(load_node_design("dgx-h100"))
    model = get_model("gpt2-350m", seq_len=1024)

    def added_s(zero: int, dp: int) -> float:
        plan = ParallelPlan(Placement(tp=1, cp=1, dp=dp, pp=1), 1, 4, "bf16", "adamw", "none", "flash",
                            zero=zero, grad_accumulation=mode)
        tasks = build_program(model, dgx.gpu_spec, dgx, plan).tasks[0]
        return sum(t.duration_s for t in tasks if isinstance(t, ComputeTask) and t.name == "gradient accumulation")
    whole, sharded = added_s(0, 8), added_s(3, 8)
    assert 0 < sharded < whole / 4
    assert added_s(0, 8) == pytest.approx(added_s(2, 8))      # ZeRO-1/2 reduce the full buffer once, at the end


def test_runs_fix_names_the_keys_it_resets_with_the_zero_stage():
    # the ZeRO-3 fix is timed without param_gather_with_optimizer_step (refused there): the suggestion
    # must say so, or writing it as shown would be refused
    from scalesim.app.fitting import fit_options
    data = {"name": "t", "cluster": {"node": "rtx4090-pcie-8", "gpus": 8}, "model": "gpt2-1.5b",
            "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 64, "micro_batch": 8},
            "parallel": {"pp": 2, "zero": 1, "overlap_param_gather": True, "param_gather_with_optimizer_step": True,
                         "pp_schedule": "interleaved", "virtual_stages": 2}}
    base = Scenario.model_validate(data)
    changes = [o.change for o in fit_options(prepare(base), limit=20)]
    with_zero3 = [c for c in changes if "parallel.zero: 3" in c]
    assert with_zero3 and all("parallel.param_gather_with_optimizer_step: false" in c for c in with_zero3)
    assert not any("param_gather_with_optimizer_step" in c for c in changes if "parallel.zero: 2" in c)


def test_a_gpu_count_that_no_longer_matches_dp_says_what_to_set():
    # a new user's first edit: scenarios/8x4090-ddp.yaml with gpus: 1 was refused saying only that
    # 8 x 1 x 1 x 1 and 1 GPUs "must be equal"
    from scalesim.errors import InputError
    from scalesim.scenario import load_scenario

    from pathlib import Path

    shipped, _ = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "8x4090-ddp.yaml")
    one = shipped.with_changes(cluster={"gpus": 1})
    with pytest.raises(InputError, match="set parallel.dp to 1, or leave it out") as error:
        prepare(one)
    assert error.value.key == "parallel.dp"
    odd = Scenario.model_validate({**BASE, "cluster": {"node": "dgx-h100", "gpus": 6}, "parallel": {"tp": 4, "dp": 2}})
    with pytest.raises(InputError, match=r"a multiple of tp x pp x cp \(4\)"):
        prepare(odd)
