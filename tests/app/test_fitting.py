"""Does it fit? The memory verdict and the model-checked suggestions."""

import json

import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.app.fitting import _candidates, fit_options
from scalesim.app.setup import memory_of, prepare
from scalesim.app.run import run
from scalesim.scenario import Scenario


def scenario(**kw) -> Scenario:
    data = {"name": "t", "cluster": {"node": kw.pop("node", "rtx4090-pcie-8"), "gpus": kw.pop("gpus", 8)},
            "model": kw.pop("model", "gpt2-1.5b"),
            "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 64, "micro_batch": kw.pop("mb", 8)},
            "parallel": {"zero": kw.pop("zero", 0)}}
    return Scenario.model_validate(data)


def test_full_fine_tune_of_7b_on_one_4090_does_not_fit_and_says_why(tmp_path):
    path = tmp_path / "7b.yaml"
    path.write_text(yaml.safe_dump({"name": "7b", "cluster": {"node": "rtx4090-pcie-4", "gpus": 1},
                                    "model": "llama2-7b",
                                    "training": {"seq_len": 2048, "global_batch": 4, "micro_batch": 4,
                                                 "tokens": 1e8}}))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 3
    assert "needs" in result.output and "24.0 GiB" in result.output and "optimizer" in result.output
    # no time or cost as if it could run; the JSON keeps them, with fits: false
    assert "cost to train (cloud)" not in result.output and "time and cost to train" in result.output
    data = json.loads(CliRunner().invoke(main, ["run", str(path), "--no-plots", "--json"]).stdout)
    assert data["fits"] is False and data["time_to_train_s"] > 0 and data["cost_usd"] > 0


def test_1_5b_on_eight_4090s_fits_with_zero3():
    assert not run(scenario(mb=8)).fits
    assert run(scenario(mb=2, zero=3)).fits


def test_every_suggestion_fits_when_applied():
    setup = prepare(scenario(mb=8))
    options = fit_options(setup)
    assert options
    for option in options:
        assert option.memory_bytes <= setup.gpu.memory_bytes
    times = [o.step_time_s for o in options]
    assert times == sorted(times)


def test_zero_offload_frees_the_optimizer_state_and_pays_in_pcie_and_cpu_time():
    base = scenario(node="rtx4090-pcie-8", gpus=8, model="gpt2-350m", mb=4, zero=2)
    offloaded = base.with_changes(parallel={"offload_optimizer": True})
    on_gpu, on_cpu = run(base), run(offloaded)
    assert on_cpu.memory_breakdown["optimizer"] == 0 < on_gpu.memory_breakdown["optimizer"]
    assert on_cpu.step_time_s > on_gpu.step_time_s
    timeline = on_cpu.timeline
    assert {iv.name for iv in timeline.intervals} >= {"grads to host", "CPU optimizer step", "weights to GPU"}


def test_when_no_single_change_fits_the_fewest_more_gpus_that_do_are_named_and_checked():
    from scalesim.app.fitting import more_gpus_option
    from scalesim.app.setup import host_fit_reason

    one = Scenario.model_validate({"name": "7b", "cluster": {"node": "rtx4090-pcie-4", "gpus": 1},
                                   "model": "llama2-7b",
                                   "training": {"seq_len": 2048, "global_batch": 4, "micro_batch": 4}})
    setup = prepare(one)
    assert fit_options(setup) == []
    more = more_gpus_option(setup, host_fit_reason)
    assert more is not None and more.memory_bytes <= setup.gpu.memory_bytes
    gpus = int(more.change.split("cluster.gpus: ")[1].split()[0])
    assert 1 < gpus <= 4
    # Half as many GPUs with the same recipe would not fit: it is the fewest.
    fewer = one.with_changes(cluster={"gpus": max(1, gpus // 2)},
                             parallel={"zero": 3 if gpus // 2 > 1 else 0,
                                       "offload_optimizer": "offload_optimizer: true" in more.change},
                             training={"micro_batch": 1, "activation_checkpointing": "full"})
    assert memory_of(prepare(fewer)).total > setup.gpu.memory_bytes
    # run itself first tries combinations on the one GPU: weights and optimizer offloaded (ZeRO-Infinity
    # style) hold 7B on a 24 GiB card, so that is what it proposes, not more GPUs.
    reason = run(one, baseline=False).reason
    assert "would fit: " in reason and "parallel.offload_params: true" in reason


def test_a_model_no_gpu_count_of_the_cluster_holds_says_so():
    huge = Scenario.model_validate({"name": "405b", "cluster": {"node": "rtx4090-pcie-4", "gpus": 1},
                                    "model": "llama3-405b",
                                    "training": {"seq_len": 2048, "global_batch": 4, "micro_batch": 1}})
    reason = run(huge, baseline=False).reason
    assert "not even all 4 GPUs of the cluster" in reason and "more nodes or a GPU with more memory" in reason


def test_every_fix_run_suggests_is_a_plan_the_search_finds_fitting(tmp_path):
    """One search: each change `run` proposes, applied, is a plan of `sweep --search`'s space that
    the search also finds to fit (so it never says "no plan fits" where run knows one)."""
    from scalesim.app.plans import own_plan_point
    from scalesim.app.sweep import run_sweep

    base = scenario(mb=8, gpus=2)
    base = base.with_changes(training={"global_batch": 16, "finetune_allowed": ["lora"]})
    setup = prepare(base)
    assert memory_of(setup).total > setup.gpu.memory_bytes
    options = fit_options(setup, limit=20)
    assert len(options) > 1
    rows = {r["plan"]: r for r in run_sweep(base, None, [2], search=True)["rows"]}
    for option in options:
        fixed = base.with_changes(**_sections(option.change))
        point = own_plan_point(fixed, 2)
        assert rows[point.label]["status"] in ("ok", "dominated"), (option.change, rows[point.label])


def _sections(change: str) -> dict:
    """'parallel.zero: 3 and training.activation_checkpointing: full' -> {"parallel": {"zero": 3}, ...}."""
    import re

    out: dict = {}
    for key, value in re.findall(r"(\w+\.\w+): (\w+)", change):
        section, name = key.split(".")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    if "tp" in out.get("parallel", {}):
        out["parallel"]["dp"] = 2 // out["parallel"]["tp"]
    return out


def test_a_scenario_with_recompute_modules_is_offered_full_recompute():
    # The modules go with selective recompute only: the full-recompute fix must drop them, not fail
    # as a plan that cannot be formed (and so never be offered).
    data = scenario(mb=8).model_dump()
    data["training"].update(activation_checkpointing="selective", recompute_modules=["core_attn"])
    setup = prepare(Scenario.model_validate(data))
    changes = [o.change for o in fit_options(setup, limit=20)]
    assert any("training.activation_checkpointing: full" in c for c in changes), changes


def test_optimizer_none_has_nothing_to_offload():
    import pytest
    from scalesim.errors import InputError
    def with_none(**parallel):
        data = scenario(mb=1, zero=3).model_dump()
        data["training"]["optimizer"] = "none"
        data["parallel"].update(parallel)
        return Scenario.model_validate(data)
    with pytest.raises(InputError) as exc:
        prepare(with_none(offload_optimizer=True), "s.yaml")
    assert exc.value.key == "parallel.offload_optimizer" and exc.value.file == "s.yaml"
    # Offloaded weights in full training update on the host, but there is no update: no host step.
    assert not prepare(with_none(offload_params=True)).plan.offload_optimizer
    # and the fixes never propose offloading it
    assert not any("offload_optimizer" in c for c, _ in _candidates(prepare(with_none())))


def test_the_does_not_fit_line_names_the_memory_parts_as_the_memory_row_does():
    # DDP's gradient buckets take memory here: in words, as the table's "of which" row says them, largest first
    from scalesim.app.run import _fit_reason
    from scalesim.result import memory_parts

    setup = prepare(scenario(mb=8))
    memory = memory_of(setup)
    assert memory.grad_buckets > 0
    reason = _fit_reason(memory, setup.gpu.memory_bytes, setup.gpu)
    assert "grad_buckets" not in reason and "gradient buckets" in reason and "overhead (CUDA context" in reason
    parts = dict(sorted(memory.as_dict().items(), key=lambda kv: -kv[1]))
    assert reason.endswith(f"({memory_parts(parts)})")
