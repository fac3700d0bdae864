"""From a simulated step to procurement inputs: defaults by design, sources, busy time."""

import pytest

from scalesim.costs import economics as econ
from scalesim.app.run import run
from scalesim.scenario import Scenario


def scenario(node, gpus=2, **extra):
    return Scenario.model_validate({
        "name": f"{node} x{gpus}", "cluster": {"node": node, "gpus": gpus}, "model": "gpt2-124m",
        "training": {"precision": "bf16", "seq_len": 256, "global_batch": 8, "micro_batch": 2, "tokens": 1e8},
        **extra})


def test_defaults_follow_the_node_design_and_every_input_has_a_source():
    nvswitch = run(scenario("dgx-a100"), baseline=False)
    pcie = run(scenario("rtx4090-pcie-8"), baseline=False)
    assert nvswitch.inputs.ownership.server_usd == econ.SERVER_USD_NVSWITCH
    assert pcie.inputs.ownership.server_usd == econ.SERVER_USD_PCIE
    assert nvswitch.inputs.ownership.network_usd == 0           # one node: no fabric to buy
    for result in (nvswitch, pcie):
        assert all(a["source"] for a in result.assumptions)
    # ECC A100 vs GeForce: the non-ECC default is higher.
    assert pcie.inputs.failures.failure_rate_per_gpu_hour > nvswitch.inputs.failures.failure_rate_per_gpu_hour


def test_scenario_values_override_defaults_and_are_marked_as_such():
    r = run(scenario("dgx-a100", pricing={"gpu_hour_usd": 1.0, "ownership": {"server_usd": 1000.0}},
                     reliability={"failure_rate_per_gpu_hour": 0.0}), baseline=False)
    assert r.inputs.ownership.server_usd == 1000.0 and r.inputs.prices.gpu_hour_usd == 1.0
    sources = {a["input"]: a["source"] for a in r.assumptions}
    assert sources["server without GPUs (USD/node)"] == "scenario"
    assert r.reliability["expected_interruptions"] == 0
    assert r.cost_usd == pytest.approx(r.gpus * r.time_to_train_s / 3600 * 1.0)


def test_multi_node_clusters_buy_a_network():
    r = run(scenario("dgx-h100", gpus=16, cluster={"node": "dgx-h100", "nodes": 2, "gpus": 16,
                                                    "fabric": {"link": "ib-ndr", "nics_per_node": 8}},
                     training={"precision": "bf16", "seq_len": 256, "global_batch": 32, "micro_batch": 2,
                               "tokens": 1e8}), baseline=False)
    assert r.inputs.nodes == 2
    assert r.inputs.ownership.network_usd == 8 * econ.NETWORK_USD_PER_PORT_FAST


def test_busy_fraction_is_measured_per_gpu_and_lies_in_zero_one():
    r = run(scenario("rtx4090-pcie-8", gpus=4), baseline=False)
    assert 0 < r.inputs.busy_fraction <= 1
    # The kernels run at most the step minus exposed communication on the slowest GPU.
    assert r.inputs.busy_fraction <= 1 - r.breakdown.exposed_comm / r.step_time_s + 1e-9


def test_a_gpu_without_an_fp8_measurement_says_its_fp8_figure_is_an_upper_bound():
    from pathlib import Path

    from scalesim.app.procurement import model_assumptions
    from scalesim.app.setup import prepare
    from scalesim.scenario import load_scenario
    claims = Path(__file__).resolve().parents[2] / "scenarios" / "claims" / "fp8"
    rtx = dict((name, source) for name, _value, source in model_assumptions(prepare(*load_scenario(claims / "8x4090-fp8.yaml"))))
    h100 = dict((name, source) for name, _value, source in model_assumptions(prepare(*load_scenario(claims / "8xh100-fp8.yaml"))))
    assert "upper bound" in rtx["GEMM efficiency (large GEMMs)"]
    assert "upper bound" not in h100["GEMM efficiency (large GEMMs)"]


def test_a_power_limited_clock_is_listed_where_the_catalog_sets_one():
    from pathlib import Path

    from scalesim.app.procurement import model_assumptions
    from scalesim.app.setup import prepare
    from scalesim.scenario import load_scenario
    claims = Path(__file__).resolve().parents[2] / "scenarios" / "claims" / "fp8"
    h100 = {name: value for name, value, _ in model_assumptions(prepare(*load_scenario(claims / "8xh100-fp8.yaml")))}
    rtx = {name: value for name, value, _ in model_assumptions(prepare(*load_scenario(claims / "8x4090-fp8.yaml")))}
    key = "sustained clock in training (fraction of the clock its kernel figures were taken at)"
    assert 0 < h100[key] < 1 and key not in rtx


def test_owned_cluster_utilisation_has_a_sourced_default_a_user_may_override():
    default = run(scenario("dgx-a100"), baseline=False)
    given = run(scenario("dgx-a100", pricing={"ownership": {"utilisation": 0.5}}), baseline=False)
    rows = {r["input"]: r for r in default.assumptions}
    row = rows["utilisation of the owned cluster"]
    assert row["value"] == econ.UTILISATION < 1.0 and "arXiv" in row["source"]
    assert {r["input"]: r for r in given.assumptions}["utilisation of the owned cluster"]["source"] == "scenario"
    # Same run, same hours: the owner of a cluster idle half its life pays more for them.
    assert given.time_to_train_s == pytest.approx(default.time_to_train_s)
    own, own_half = default.economics["on_prem"], given.economics["on_prem"]
    assert own_half["amortised_usd"] == pytest.approx(own["amortised_usd"] * econ.UTILISATION / 0.5)
