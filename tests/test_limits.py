"""Every input is simulated quickly or refused naming the key, the limit and why; nothing runs unbounded."""

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim import InputError
from scalesim.cli import main
from scalesim.limits import MAX_CLUSTER_GPUS, TimeLimitExceeded, check_cluster_size, check_time, time_limit

ROOT = Path(__file__).resolve().parents[1]
GOOD = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
INLINE = {"kind": "transformer", "layers": 24, "hidden": 1024, "heads": 16, "vocab": 50257}
FABRIC = {"link": "ib-ndr", "nics_per_node": 8}


def scenario(tmp_path, **changes) -> str:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = data
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def refused(path, *needles, args=()):
    start = time.process_time()
    result = CliRunner().invoke(main, ["run", path, "--no-plots", "--no-scaling", *args])
    assert time.process_time() - start < 5, "refusing must not take long"
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output
    return result.output


@pytest.mark.parametrize("changes,key", [
    ({"cluster__nodes": 10**6, "cluster__fabric": FABRIC}, "cluster.nodes"),
    ({"cluster__nodes": 2**63, "cluster__fabric": FABRIC}, "cluster.nodes"),
    ({"cluster__nodes": 2, "cluster__fabric": {**FABRIC, "nics_per_node": 10**9}}, "cluster.fabric.nics_per_node"),
    ({"cluster__node": {"gpu": "rtx4090", "gpus": 10**6}}, "cluster.node.gpus"),
    ({"model": {**INLINE, "layers": 10**6}}, "model.layers"),
    ({"model": {**INLINE, "hidden": 2**63}}, "model.hidden"),
    ({"training__global_batch": 10**9}, "training.global_batch"),
    ({"training__tokens": 1e30}, "training.tokens"),
])
def test_huge_values_are_refused_with_the_key_the_limit_and_why(tmp_path, changes, key):
    message = refused(scenario(tmp_path, **changes), f"'{key}'", "above the limit of")
    reason = message.split("above the limit of", 1)[1]
    assert ":" in reason and len(reason.split(":", 1)[1].strip()) > 20, "the reason is given"


def test_clusters_beyond_the_limit_are_refused_whatever_the_node_size():
    check_cluster_size(MAX_CLUSTER_GPUS // 8, 8)          # 32,768 GPUs of 8-GPU nodes: allowed
    with pytest.raises(InputError) as err:
        check_cluster_size(4096, 16)
    assert err.value.key == "cluster.nodes" and "65,536 GPUs" in str(err.value)


def test_a_step_with_too_many_tasks_is_refused_naming_what_drives_it(tmp_path):
    # 1,000 layers x 1,024 micro-batches: ~3 M tasks even with one GPU standing for its 8 peers.
    path = scenario(tmp_path, model={**INLINE, "layers": 1000}, training__global_batch=8 * 8 * 1024)
    refused(path, "'training.global_batch'", "simulated tasks", "micro-batches", "layers")


def test_a_big_step_on_few_gpus_simulates_one_rank_for_its_peers():
    from scalesim.app.setup import prepare, simulate_setup
    from scalesim.scenario import load_scenario

    s, file = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    small = prepare(s, file)
    big = prepare(s.with_changes(training={"global_batch": 128 * 128}), file)    # 256 micro-batches
    assert len({iv.rank for iv in simulate_setup(small).intervals}) == 8
    timeline = simulate_setup(big)
    assert len({iv.rank for iv in timeline.intervals}) == 1
    # 128x the micro-batches: up to 128x the step, less as the once-a-step gradient
    # reduction is amortised, but at least the compute (three quarters of the small step).
    assert 0.7 * 128 < timeline.end_s / simulate_setup(small).end_s <= 128


def test_tiny_gradient_buckets_are_refused(tmp_path):
    refused(scenario(tmp_path, parallel__bucket_mb=1e-6), "'parallel.bucket_mb'", "gradient buckets")


def test_too_many_bucket_tasks_name_the_key_that_sizes_the_buckets():
    from scalesim.limits import check_step_size

    counts = dict(ranks=8, micro_batches=1, tasks_per_micro_batch=10.0, buckets_per_rank=10_000_000.0)
    for key in ("parallel.bucket_mb", "parallel.bucket_params"):     # Megatron-Core's whole-tensor buckets
        with pytest.raises(InputError) as err:
            check_step_size(bucket_key=key, **counts)
        assert err.value.key == key and f"raise {key}" in str(err.value)


def test_a_time_limit_stops_a_library_run_with_an_input_error():
    from scalesim.app.run import run
    from scalesim.scenario import load_scenario

    s, file = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    with pytest.raises(TimeLimitExceeded) as err, time_limit(1e-6):
        time.sleep(0.01)
        run(s, file)
    assert isinstance(err.value, InputError) and err.value.key == "--max-seconds"
    check_time()                      # the limit ends with its block
    with pytest.raises(TimeLimitExceeded):
        run(s, file, max_seconds=1e-9)


def test_max_seconds_on_the_command_line(tmp_path):
    refused(str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "'--max-seconds'", "longer than", args=["--max-seconds", "1e-9"])


def test_a_time_to_train_beyond_a_century_is_shown_in_years(tmp_path):
    result = CliRunner().invoke(main, ["run", scenario(tmp_path, training__tokens=1e16), "--no-plots", "--no-scaling"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "time to train" in line)
    assert "years" in line and " d " not in line


def test_every_validation_scenario_is_within_the_limits():
    # The limits refuse only what no real system needs: every published measurement's plan
    # (up to Megatron-LM's 1T-parameter GPT on 3,072 A100s) still passes them.
    from scalesim.app.setup import prepare
    from scalesim.scenario import load_scenario

    from scalesim.app.serve_compare import is_serving_file

    files = [p for p in sorted((ROOT / "validation" / "scenarios").glob("*.yaml")) if not is_serving_file(p)]
    assert len(files) > 30
    for path in files:
        s, file = load_scenario(path)
        prepare(s, file)


def test_the_commands_refuse_a_step_beyond_their_answer_time_unless_max_seconds_allows_it(tmp_path):
    # GPT-3 175B on 1,024 A100s at twice the shipped batch: 384 micro-batches on 16 pipeline
    # stages, ~490,000 simulated tasks, about 20 s to play out: refused at once by default.
    from scalesim.app.setup import prepare
    from scalesim.limits import answer_budget
    from scalesim.scenario import load_scenario

    flagship = ROOT / "scenarios" / "1024xa100-gpt3-175b.yaml"
    data = yaml.safe_load(flagship.read_text())
    data["training"]["global_batch"] *= 2
    path = tmp_path / "gpt3-2x.yaml"
    path.write_text(yaml.safe_dump(data))
    message = refused(str(path), "'training.global_batch'", "simulated tasks", "s of simulation", "--max-seconds")
    assert "384 micro-batches" in message
    s, file = load_scenario(path)
    with answer_budget(60):
        prepare(s, file)                                  # the user allowed a minute
    prepare(s, file)                                      # the library has only the hard cap
    with answer_budget():
        shipped, file = load_scenario(flagship)
        prepare(shipped, file)                            # the shipped scenario is within the default


def test_run_says_which_what_if_fixes_the_answer_budget_left_unsimulated():
    # Llama 2 7B with plain DDP does not fit an RTX 4090; the changes that would fit are
    # simulated only while the command's answer budget lasts, and say so when it is spent.
    from scalesim.app.run import run_setup
    from scalesim.app.setup import prepare
    from scalesim.limits import MAX_STEP_TASKS, answer_budget, charge
    from scalesim.scenario import load_scenario

    s, file = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    with answer_budget():
        setup = prepare(s.with_changes(model="llama2-7b", training={"global_batch": 16, "micro_batch": 1}), file)
        charge(MAX_STEP_TASKS)                            # as if earlier steps had used the budget up
        result = run_setup(setup, baseline=False)
    assert not result.fits
    assert "would fit" in result.reason and "step not simulated: over the answer budget" in result.reason
    assert "tasks estimated; --max-seconds" in result.reason


def test_a_searched_plan_over_the_answer_budget_says_so_in_its_row():
    from scalesim.app.plans import PlanPoint, check_point
    from scalesim.limits import answer_budget
    from scalesim.scenario import load_scenario

    s, file = load_scenario(ROOT / "scenarios" / "8x4090-ddp.yaml")
    base = s.with_changes(training={"global_batch": 4096})
    point = PlanPoint(gpus=8, dp=1, tp=8, micro_batch=1)   # 4,096 micro-batches, TP calls around each half
    with answer_budget():
        row = check_point(point, base, file)
    assert row["status"] == "not_available" and row["reason"].startswith("over the answer budget (")
    assert "--max-seconds" in row["reason"] and row["estimated_tasks"] > 260_000
    assert check_point(point, base, file)["status"] == "ok"     # the library allows up to the hard cap


# ---------------------------------------------------------------- options and serving loads

SERVE = ROOT / "scenarios" / "serve-1x4090-llama3-8b.yaml"


def serving_file(tmp_path, **requests) -> str:
    data = yaml.safe_load(SERVE.read_text())
    data["serving"]["requests"].update(requests)
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def answered(args, code=2):
    start = time.process_time()
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert time.process_time() - start < 5, "refusing must not take long"
    assert result.exit_code == code and "Traceback" not in result.output, result.output
    return result.output


@pytest.mark.parametrize("args, needles", [
    (["sweep", ROOT / "scenarios" / "8x4090-ddp.yaml", "--gpus", "8", "--workers", str(10**6)],
     ["'--workers'", "per CPU", "allowed: 1.."]),
    (["validate", "--workers", str(10**6), "--only", "collective", "--fast"], ["'--workers'", "per CPU"]),
    (["run", ROOT / "scenarios" / "8x4090-ddp.yaml", "--seed", "-5", "--samples", "10"], ["'--seed'", "x>=0"]),
])
def test_options_beyond_what_makes_sense_are_refused_naming_the_option(tmp_path, args, needles):
    if args[0] == "sweep":
        args = [*args, "--out", tmp_path / "sweep"]
    output = answered(args)
    for needle in needles:
        assert needle in output, output


def test_a_serving_load_beyond_the_answer_budget_is_refused_before_any_request_is_made(tmp_path):
    # 10^6 requests (below the 10^7 limit): their ~5 x 10^8 sequence steps would take minutes;
    # refused before the requests are even generated.
    output = answered(["serve", serving_file(tmp_path, count=10**6), "--no-plots"])
    assert "'serving.requests.count'" in output and "sequence steps" in output and "fewer requests" in output


@pytest.mark.parametrize("requests, key", [
    ({"count": 10**9}, "serving.requests.count"),
    ({"output_tokens": {"mean": 10**9}}, "serving.requests.output_tokens.mean"),
])
def test_absurd_serving_values_are_refused_with_the_limit_and_why(tmp_path, requests, key):
    output = answered(["serve", serving_file(tmp_path, **requests), "--no-plots"])
    assert f"'{key}'" in output and "above the limit of" in output


def test_a_slo_no_rate_can_meet_skips_the_rate_search():
    # One token alone takes longer than a 1 ns TTFT: lowering the rate cannot help, so the
    # search stops at once instead of halving the rate twelve times.
    from scalesim.app.serve import serve
    from scalesim.serving.spec import load_serving_scenario

    s, file = load_serving_scenario(SERVE)
    strict = s.model_copy(update={"serving": s.serving.model_copy(update={"slo": s.serving.slo.model_copy(
        update={"ttft_s": 1e-9})})})
    result = serve(strict, file)
    assert result["max_rate_under_slo"] is None and result["sweep"] == []
    assert serve(s, file)["max_rate_under_slo"] is not None        # the shipped SLO is met at some rate


def test_a_collective_beyond_the_answer_budget_is_refused_naming_what_to_lower():
    # 31 sizes (8 B to 8 GiB) on 256 GPUs: ~25 s of planning and playing out.
    output = answered(["collective", "--topology", "dgx-h100", "--nodes", "32", "--fabric", "ib-ndr",
                       "--sizes", "8:8G"])
    assert "'--sizes'" in output and "256 GPUs" in output and "give at most" in output


def test_the_default_sizes_are_thinned_to_the_answer_budget_with_a_note(monkeypatch):
    # A user who gave no --sizes gets the sizes that fit (smallest and largest kept), not a refusal.
    import scalesim.limits as limits

    monkeypatch.setattr(limits, "COLLECTIVE_S_PER_GPU_LOG", 10 / (3.5 * 16 * 4))   # 3 sizes fit on 16 GPUs
    result = CliRunner().invoke(main, ["collective", "--topology", "dgx-h100", "--nodes", "2",
                                                       "--fabric", "ib-ndr", "--json"])
    assert result.exit_code == 0, result.output
    sizes = [row["bytes"] for row in json.loads(result.stdout)]
    assert len(sizes) == 3 and sizes[0] == 8 and sizes[-1] == 8 * 2**30
    assert "--sizes" in result.stderr
    refused = CliRunner().invoke(main, ["collective", "--topology", "dgx-h100", "--nodes", "2", "--fabric", "ib-ndr",
                                        "--sizes", "8:8G"])
    assert refused.exit_code == 2 and "give at most 3 sizes" in refused.output
