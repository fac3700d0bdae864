"""Whole scenarios: the physics and invariants a user relies on."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.app.run import run
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["8x4090-ddp", "8xa100-ddp", "8xh100-ddp"]


def load(name):
    return load_scenario(ROOT / "scenarios" / f"{name}.yaml")


@pytest.fixture(scope="module")
def results():
    return {name: run(*load(name)) for name in SCENARIOS}


@pytest.mark.parametrize("name", SCENARIOS)
def test_breakdown_sums_to_the_step_and_hidden_comm_is_not_exposed(results, name):
    r = results[name]
    parts = r.breakdown.as_dict()
    assert sum(parts.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert all(v >= 0 for v in parts.values())
    assert r.breakdown.exposed_comm <= r.breakdown.total_comm + 1e-12
    assert 0 < r.mfu < 1


def test_pcie_4090s_scale_clearly_worse_than_nvswitch_a100s(results):
    rtx, a100 = results["8x4090-ddp"], results["8xa100-ddp"]
    assert rtx.scaling_efficiency < a100.scaling_efficiency - 0.03
    assert rtx.breakdown.exposed_comm / rtx.step_time_s > 5 * a100.breakdown.exposed_comm / a100.step_time_s


def test_same_scenario_gives_byte_identical_json(tmp_path):
    path = str(ROOT / "scenarios" / "8x4090-ddp.yaml")
    outs = [CliRunner().invoke(main, ["run", path, "--json", "--out", str(tmp_path)]).output for _ in range(2)]
    assert outs[0] == outs[1]
    data = json.loads(outs[0])
    assert data["gpus"] == 8 and data["fits"] is True


def test_one_gpu_scales_perfectly_by_definition():
    scenario, file = load("8xa100-ddp")
    one = scenario.with_changes(cluster={"gpus": 1}, parallel={"dp": 1}, training={"global_batch": 16})
    r = run(one, file)
    assert r.scaling_efficiency == pytest.approx(1.0)
    assert r.breakdown.total_comm == 0


def test_turning_off_overlap_exposes_more_communication():
    scenario, file = load("8x4090-ddp")
    overlapped = run(scenario, file)
    serial = run(scenario.with_changes(parallel={"overlap_grad_reduce": False}), file)
    assert serial.breakdown.exposed_comm > overlapped.breakdown.exposed_comm
    assert serial.step_time_s > overlapped.step_time_s


def test_hidden_communication_slows_the_gpu_work_it_overlaps_and_serial_communication_does_not():
    # NCCL's blocks take SMs from the backward pass they overlap; nothing overlaps when serial.
    scenario, file = load("8xa100-ddp")
    overlapped = run(scenario, file)
    serial = run(scenario.with_changes(parallel={"overlap_grad_reduce": False}), file)
    slowed = overlapped.breakdown.compute_slowed_by_comm
    assert 0 < slowed < overlapped.breakdown.total_comm
    assert overlapped.to_json()["compute_slowed_by_comm_s"] == slowed
    assert serial.breakdown.compute_slowed_by_comm == 0.0


def test_p2p_on_the_4090_is_never_slower_than_host_staging():
    scenario, file = load("8x4090-ddp")
    from scalesim.topology import load_node_design
    design = load_node_design("rtx4090-pcie-8").model_dump()
    staged = run(scenario.with_changes(cluster={"node": {**design, "p2p": False}}), file)
    direct = run(scenario.with_changes(cluster={"node": {**design, "p2p": True}}), file)
    assert direct.step_time_s <= staged.step_time_s
    assert direct.breakdown.total_comm < staged.breakdown.total_comm


def test_more_accumulation_amortises_communication():
    scenario, file = load("8x4090-ddp")
    few = run(scenario.with_changes(training={"global_batch": 64}), file)
    many = run(scenario.with_changes(training={"global_batch": 512}), file)
    assert many.scaling_efficiency > few.scaling_efficiency
    # The reduction happens once per optimizer step whatever the accumulation.
    assert many.breakdown.total_comm == pytest.approx(few.breakdown.total_comm, rel=1e-9)


def test_full_recompute_costs_time_but_not_model_flops_and_saves_memory():
    scenario, file = load("8xa100-ddp")
    plain = run(scenario, file)
    recompute = run(scenario.with_changes(training={"activation_checkpointing": "full"}), file)
    assert recompute.step_time_s > plain.step_time_s
    assert recompute.mfu < plain.mfu
    assert recompute.tflops_per_gpu * recompute.step_time_s == pytest.approx(plain.tflops_per_gpu * plain.step_time_s)
    assert recompute.memory_breakdown["activations"] < plain.memory_breakdown["activations"]


def test_per_op_checkpointing_sits_between_none_and_full_in_time_and_memory():
    scenario, file = load("8xa100-ddp")
    runs = {mode: run(scenario.with_changes(training={"activation_checkpointing": mode}), file)
            for mode in ("none", "selective-op", "full")}
    assert runs["none"].step_time_s < runs["selective-op"].step_time_s < runs["full"].step_time_s
    acts = {mode: r.memory_breakdown["activations"] for mode, r in runs.items()}
    assert acts["full"] < acts["selective-op"] < acts["none"]


def test_a_plan_that_does_not_fit_exits_3_and_says_why(tmp_path):
    import yaml
    data = yaml.safe_load((ROOT / "scenarios" / "8x4090-ddp.yaml").read_text())
    data["model"] = "gpt2-1.5b"
    data["training"]["micro_batch"] = 16
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--json", "--no-plots"])
    assert result.exit_code == 3
    out = json.loads(result.stdout)
    assert out["fits"] is False and out["memory_per_gpu_bytes"] > out["memory_capacity_bytes"]
    assert "activations" in out["reason"]


def test_run_writes_labelled_plots(tmp_path):
    result = CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / "8xh100-ddp.yaml"), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert (tmp_path / "scaling.png").stat().st_size > 10_000


def _grad_bytes_and_memory(scenario):
    from scalesim.parallel.builder import build_program
    from scalesim.program import CollectiveTask
    from scalesim.app.setup import memory_of, prepare
    setup = prepare(scenario)
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=True)
    sent = sum(t.plan.size_bytes for t in program.tasks[0]
               if isinstance(t, CollectiveTask) and t.key.startswith("grad/"))
    return sent, memory_of(setup)


def test_plain_ddp_in_bf16_reduces_fp32_gradients_as_pytorch_autocast_does():
    scenario, _ = load("8x4090-ddp")
    auto, memory = _grad_bytes_and_memory(scenario)
    sixteen, _ = _grad_bytes_and_memory(scenario.with_changes(parallel={"grad_reduce_dtype": "bf16"}))
    assert auto == pytest.approx(2 * sixteen)
    # fp32 weights and gradients updated in place, Adam's two fp32 moments, fp32 DDP buckets
    params = memory.weights / 4
    assert (memory.gradients, memory.optimizer, memory.grad_buckets) == pytest.approx((4 * params, 8 * params, 4 * params))


def test_megatron_style_plans_keep_16_bit_gradients():
    scenario, _ = load("8xa100-ddp")
    tensor_parallel = scenario.with_changes(parallel={"tp": 2, "dp": 4})
    auto, memory = _grad_bytes_and_memory(tensor_parallel)
    fp32, _ = _grad_bytes_and_memory(tensor_parallel.with_changes(parallel={"grad_reduce_dtype": "fp32"}))
    assert fp32 == pytest.approx(2 * auto)
    params = memory.weights / 2
    assert memory.optimizer == pytest.approx(12 * params)      # fp32 master + two moments


def test_zero_offload_keeps_16_bit_weights_on_the_gpu():
    scenario, _ = load("8x4090-ddp")
    _, memory = _grad_bytes_and_memory(scenario.with_changes(parallel={"offload_optimizer": True}))
    params = memory.gradients / 2
    assert memory.weights == pytest.approx(2 * params) and memory.optimizer == 0


def test_offloaded_optimizer_state_must_fit_in_the_nodes_host_memory():
    import yaml

    from scalesim.app.setup import host_offload_bytes_per_node, prepare
    from scalesim.scenario import Scenario
    design = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
    assert design["host"]["memory_gb"] == 2000          # DGX H100: 2 TB (MLPerf system description)

    def scenario(host_gb):
        node = {**design, "host": {**design["host"], "memory_gb": host_gb}}
        return Scenario.model_validate({
            "name": "offload", "cluster": {"node": node}, "model": "llama2-7b",
            "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
            "parallel": {"dp": 8, "zero": 1, "offload_optimizer": True}})

    setup = prepare(scenario(2000))
    # fp32 masters and two moments: 12 bytes per parameter, 1/8 on each of the node's 8 GPUs
    assert host_offload_bytes_per_node(setup) == pytest.approx(12 * setup.model.params, rel=0.02)
    assert run(scenario(2000), baseline=False).fits
    small = run(scenario(50), baseline=False)
    assert small.fits is False and "host memory" in small.reason


def test_suggestions_are_checked_against_host_memory_too():
    import yaml

    from scalesim.scenario import Scenario
    design = yaml.safe_load((ROOT / "topologies" / "dgx-h100.yaml").read_text())
    node = {**design, "host": {**design["host"], "memory_gb": 50}}

    def scenario(**parallel):
        return Scenario.model_validate({
            "name": "offload", "cluster": {"node": node}, "model": "llama2-7b",
            "training": {"precision": "bf16", "seq_len": 4096, "global_batch": 8, "micro_batch": 1},
            "parallel": {"dp": 8, **parallel}})

    # Offloading overflows the 50 GB host; keeping the optimizer on the GPUs fits, and is said.
    offloaded = run(scenario(zero=1, offload_optimizer=True), baseline=False)
    assert offloaded.fits is False and "parallel.offload_optimizer: false" in offloaded.reason
    # Out of GPU memory: offload would fit the GPUs but not the host, so it is not offered.
    from scalesim.app.fitting import fit_options
    from scalesim.app.setup import host_fit_reason, prepare
    setup = prepare(scenario(zero=0))
    gpu_only = [o.change for o in fit_options(setup, limit=20)]
    checked = [o.change for o in fit_options(setup, limit=20,
                                             host_fit=host_fit_reason)]
    assert "parallel.offload_optimizer: true" in gpu_only
    assert "parallel.offload_optimizer: true" not in checked and "parallel.zero: 1" in checked


def test_flash3_on_an_ampere_gpu_is_an_input_error_naming_the_key():
    from scalesim.errors import InputError
    from scalesim.app.setup import prepare
    from scalesim.scenario import Scenario
    scenario = Scenario.model_validate({
        "name": "fa3", "cluster": {"node": "dgx-a100", "gpus": 8}, "model": "llama2-7b",
        "training": {"seq_len": 4096, "global_batch": 8, "micro_batch": 1, "attention": "flash3"}})
    with pytest.raises(InputError) as err:
        prepare(scenario)
    assert err.value.key == "training.attention" and "hopper" in str(err.value)
    # flash2 and flash keep the same memory: neither stores the score matrices.
    from scalesim.app.setup import memory_of
    fa2 = prepare(scenario.with_changes(training={"attention": "flash2"}))
    fa = prepare(scenario.with_changes(training={"attention": "flash"}))
    assert memory_of(fa2).total == memory_of(fa).total


def test_a_spread_of_gpu_speeds_costs_throughput_on_many_gpus_and_nothing_on_one():
    scenario, file = load("8xa100-ddp")
    equal = run(scenario.with_changes(cluster={"gpu_speed_spread": 0.0}), file)
    spread = run(scenario.with_changes(cluster={"gpu_speed_spread": 0.03}), file)
    assert spread.step_time_s > equal.step_time_s
    assert spread.scaling_efficiency < equal.scaling_efficiency
    assert spread.to_json()["slowest_gpu_factor"] > equal.to_json()["slowest_gpu_factor"] == 1.0
    one = {"gpus": 1, "gpu_speed_spread": 0.03}
    solo = run(scenario.with_changes(cluster=one, parallel={"dp": 1}, training={"global_batch": 16}), file)
    solo_equal = run(scenario.with_changes(cluster={**one, "gpu_speed_spread": 0.0}, parallel={"dp": 1},
                                           training={"global_batch": 16}), file)
    assert solo.step_time_s == solo_equal.step_time_s


@pytest.mark.parametrize("plan", [{"dp": 16}, {"dp": 2, "tp": 4, "pp": 2}, {"dp": 16, "zero": 3}])
def test_a_faster_fabric_or_more_nics_never_slows_a_step(plan):
    from scalesim.app.setup import prepare, simulate_setup
    from scalesim.scenario import Scenario

    def step_s(link, nics):
        scenario = Scenario.model_validate({
            "name": "two nodes", "cluster": {"node": "dgx-h100", "nodes": 2,
                                             "fabric": {"link": link, "nics_per_node": nics}},
            "model": "gpt2-350m", "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 64,
                                               "micro_batch": 2},
            "parallel": plan})
        return simulate_setup(prepare(scenario)).end_s

    by_bandwidth = [step_s(link, 1) for link in ("roce-100g", "roce-200g", "roce-400g", "roce-800g")]
    assert by_bandwidth == sorted(by_bandwidth, reverse=True) and by_bandwidth[0] > by_bandwidth[-1]
    by_nics = [step_s("roce-200g", nics) for nics in (1, 2, 4, 8)]
    assert by_nics == sorted(by_nics, reverse=True)


def test_a_step_of_tiny_kernels_is_host_bound_and_cuda_graphs_remove_most_of_it():
    scenario, file = load("8xa100-ddp")
    tiny = scenario.with_changes(cluster={"gpus": 1}, parallel={"dp": 1},
                                 training={"seq_len": 64, "micro_batch": 1, "global_batch": 4})
    eager = run(tiny, file)
    graphed = run(tiny.with_changes(training={"cuda_graphs": True}), file)
    assert eager.breakdown.host_bound > 0.15 * eager.step_time_s
    assert eager.breakdown.host_bound <= eager.breakdown.other     # host-bound time is part of `other`
    assert graphed.step_time_s < 0.85 * eager.step_time_s
    assert graphed.breakdown.host_bound < 0.2 * eager.breakdown.host_bound


def test_large_gemms_hide_the_host_entirely():
    scenario, file = load("8xa100-ddp")
    big = scenario.with_changes(cluster={"gpus": 1}, parallel={"dp": 1}, training={"global_batch": 16})
    eager = run(big, file)
    graphed = run(big.with_changes(training={"cuda_graphs": True}), file)
    assert eager.breakdown.host_bound < 0.002 * eager.step_time_s
    assert graphed.step_time_s == pytest.approx(eager.step_time_s, rel=0.002)


def test_the_fit_verdict_carries_its_headroom_and_band():
    scenario, file = load("8xa100-ddp")
    out = json.loads(CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / "8xa100-ddp.yaml"), "--json",
                                               "--no-plots", "--no-scaling"]).output)
    assert out["memory_headroom_fraction"] == pytest.approx(
        1 - out["memory_per_gpu_bytes"] / out["memory_capacity_bytes"])
    assert out["fit_confidence"] in ("fits", "tight")
    huge = run(scenario.with_changes(training={"micro_batch": 256, "global_batch": 2048}), file)
    assert not huge.fits and huge.fit_confidence in ("tight", "does_not_fit") and huge.memory_headroom_fraction < 0


def test_gradients_as_bucket_views_drop_exactly_the_bucket_copy():
    scenario, file = load("8xa100-ddp")        # autocast: fp32 gradients, reduced in fp32
    copy = run(scenario, file, baseline=False)
    view = run(scenario.with_changes(parallel={"gradient_as_bucket_view": True}), file, baseline=False)
    # A view needs the reduction in the gradients' own precision; bf16 buckets of fp32 grads stay a copy.
    cast = run(scenario.with_changes(parallel={"gradient_as_bucket_view": True, "grad_reduce_dtype": "bf16"}),
               file, baseline=False)
    assert cast.memory_breakdown["grad_buckets"] > 0
    assert copy.memory_breakdown["grad_buckets"] > 0 and view.memory_breakdown["grad_buckets"] == 0
    assert view.memory_per_gpu_bytes < copy.memory_per_gpu_bytes
    assert view.step_time_s == copy.step_time_s


def test_a_masked_lm_head_on_a_decoder_is_refused_naming_the_key():
    from scalesim.errors import InputError
    scenario, file = load("8xa100-ddp")          # a GPT model
    with pytest.raises(InputError, match="training.mlm_positions"):
        run(scenario.with_changes(training={"mlm_positions": 76}), file)


def test_scaling_efficiency_says_when_its_one_gpu_reference_could_not_run(results, tmp_path):
    # ux15b: Llama 2 7B under ZeRO-3 fits 24 GiB cards only because it is sharded over 8: the same plan
    # on one card needs 16 bytes a parameter for weights, gradients and Adam state alone (> 100 GiB).
    scenario, file = load("8x4090-ddp")
    sharded = scenario.with_changes(model="llama2-7b", parallel={"zero": 3},
                                    training={"seq_len": 2048, "global_batch": 8, "micro_batch": 1,
                                              "activation_checkpointing": "full"})
    r = run(sharded, file)
    assert r.fits and r.scaling_efficiency is not None
    assert r.scaling_reference_fits is False
    assert r.scaling_reference_memory_bytes > 16 * 6.7e9 > r.memory_capacity_bytes
    from scalesim.report.tables import result_table
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(result_table(r))
    row = next(line for line in console.export_text().splitlines() if "scaling efficiency" in line)
    assert "1-GPU run that would not fit" in row and "24.0 GiB" in row
    # a plan whose 1-GPU run fits says nothing more, and the JSON carries the reference either way
    ddp = results["8x4090-ddp"]
    assert ddp.scaling_reference_fits is True
    assert ddp.scaling_reference_memory_bytes <= ddp.memory_capacity_bytes
    data = ddp.to_json()
    assert data["scaling_reference_fits"] is True and data["scaling_reference_memory_bytes"] > 0
    assert r.to_json()["scaling_reference_fits"] is False
    # the curve's points say which would fit: the fewer GPUs ZeRO-3 shards over, the more each holds
    curve = run(sharded, file, scaling_counts=[1, 2, 8]).scaling
    assert [p["fits"] for p in curve] == [False, False, True]
    assert all(p["fits"] for p in run(*load("8x4090-ddp"), scaling_counts=[1, 2, 8]).scaling)


def test_a_one_gpu_run_shows_no_scaling_efficiency_in_its_table():
    # ux15b: "100.0%" for a run compared with itself says nothing; the JSON keeps 1.0 (by definition)
    scenario, file = load("8xa100-ddp")
    r = run(scenario.with_changes(cluster={"gpus": 1}, parallel={"dp": 1}, training={"global_batch": 16}), file)
    from scalesim.report.tables import result_table
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(result_table(r))
    row = next(line for line in console.export_text().splitlines() if "scaling efficiency" in line)
    assert "n/a (1 GPU)" in row and "100.0%" not in row
    assert r.to_json()["scaling_efficiency"] == pytest.approx(1.0) and r.scaling_reference_fits is True
