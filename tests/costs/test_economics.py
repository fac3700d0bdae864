"""Time, cost and energy of a run: the bookkeeping a buyer checks by hand."""

import dataclasses

import pytest

from scalesim.costs.economics import (UTILISATION, Budget, FailureModel, Ownership, Prices, RunInputs,
                                      amortised_usd, training_economics)
from scalesim.hardware import get_gpu

NO_FAILURES = FailureModel(failure_rate_per_gpu_hour=0.0, checkpoint_s=0.0, restart_s=0.0)


def inputs(**changes) -> RunInputs:
    base = RunInputs(gpu=get_gpu("h100-sxm"), gpus=16, nodes=2, samples_per_s=100.0, tokens_per_s=409600.0,
                     busy_fraction=0.8, budget=Budget(tokens=1e11), prices=Prices(2.5, 0.12),
                     ownership=Ownership(gpu_usd=30000.0, server_usd=70000.0, network_usd=32000.0,
                                         host_power_w=2000.0, amortisation_years=4.0, pue=1.3),
                     failures=FailureModel(2e-5, 60.0, 900.0))
    return dataclasses.replace(base, **changes)


def test_cloud_cost_is_gpu_hours_times_price():
    money = training_economics(inputs())
    gpu_hours = 16 * money.time_to_train_s / 3600
    assert money.cost_usd == pytest.approx(gpu_hours * 2.5)
    assert money.details["cloud"]["gpu_hours"] == pytest.approx(gpu_hours)


def test_without_failures_time_to_train_is_the_budget_over_the_throughput():
    money = training_economics(inputs(failures=NO_FAILURES))
    assert money.time_to_train_s == pytest.approx(1e11 / 409600.0)
    assert money.details["ideal_time_s"] == pytest.approx(money.time_to_train_s)


def test_failures_stretch_the_run_and_its_cost():
    clean = training_economics(inputs(failures=NO_FAILURES))
    failing = training_economics(inputs())
    assert failing.time_to_train_s > clean.time_to_train_s
    assert failing.cost_usd / clean.cost_usd == pytest.approx(failing.time_to_train_s / clean.time_to_train_s)


def test_catalog_price_is_used_when_the_scenario_gives_none():
    gpu = get_gpu("a100-80gb-sxm")
    money = training_economics(inputs(gpu=gpu, prices=Prices(None, 0.12), failures=NO_FAILURES))
    assert money.cost_usd == pytest.approx(16 * money.time_to_train_s / 3600 * gpu.cloud_usd_per_gpu_hour)


def test_epoch_budgets_count_samples():
    money = training_economics(inputs(budget=Budget(epochs=3, dataset_samples=1_000_000), tokens_per_s=None,
                                      failures=NO_FAILURES))
    assert money.time_to_train_s == pytest.approx(3 * 1_000_000 / 100.0)


def test_energy_lies_between_all_idle_and_all_busy_and_grows_with_utilisation():
    gpu = get_gpu("h100-sxm")
    low = training_economics(inputs(busy_fraction=0.2, failures=NO_FAILURES))
    high = training_economics(inputs(busy_fraction=0.9, failures=NO_FAILURES))
    assert high.details["energy_kwh"]["gpu"] > low.details["energy_kwh"]["gpu"]
    hours = high.time_to_train_s / 3600
    gpu_kwh = high.details["energy_kwh"]["gpu"]
    assert 16 * gpu.idle_w * hours / 1000 < gpu_kwh < 16 * gpu.tdp_w * hours / 1000
    host = high.details["energy_kwh"]["host"]
    assert host == pytest.approx(2 * 2000.0 * hours / 1000)
    assert high.energy_kwh == pytest.approx(gpu_kwh + host)
    assert high.details["energy_kwh"]["facility"] == pytest.approx(1.3 * high.energy_kwh)


def test_on_premises_cost_is_amortised_purchase_plus_power():
    money = training_economics(inputs())
    own = money.details["on_prem"]
    capex = 16 * 30000.0 + 2 * 70000.0 + 2 * 32000.0
    assert own["capex_total_usd"] == pytest.approx(capex)
    hours = money.time_to_train_s / 3600
    # The purchase over the hours of the amortisation period the cluster runs jobs (its utilisation).
    assert own["amortised_usd"] == pytest.approx(capex / (4 * 8760 * own["utilisation"]) * hours)
    assert own["power_usd"] == pytest.approx(money.details["energy_kwh"]["facility"] * 0.12)
    assert own["cost_usd"] == pytest.approx(own["amortised_usd"] + own["power_usd"])


def test_an_idle_owned_cluster_charges_its_idle_time_to_the_runs():
    assert amortised_usd(1e6, 4.0, 3600.0, utilisation=0.5) == pytest.approx(2 * amortised_usd(1e6, 4.0, 3600.0))


def test_the_default_owned_cluster_is_idle_part_of_its_life():
    # Documented default below 1.0 (a published fleet figure), and what Ownership takes when not told.
    assert 0.0 < UTILISATION < 1.0
    assert Ownership(gpu_usd=1.0, server_usd=0.0, network_usd=0.0, host_power_w=0.0).utilisation == UTILISATION


@pytest.mark.parametrize("low, high", [(0.3, 0.6), (0.6, 0.8), (0.8, 1.0)])
def test_lower_utilisation_is_never_faster_nor_cheaper_to_own(low, high):
    def run(u):
        return training_economics(inputs(ownership=dataclasses.replace(inputs().ownership, utilisation=u)))
    idle, busy = run(low), run(high)
    # Idle hours between runs do not change how long this run takes, nor its cloud bill or energy ...
    assert idle.time_to_train_s == pytest.approx(busy.time_to_train_s)
    assert idle.cost_usd == pytest.approx(busy.cost_usd)
    assert idle.energy_kwh == pytest.approx(busy.energy_kwh)
    # ... but the owner pays for them: the run's share of the purchase grows as 1 / utilisation.
    a, b = idle.details["on_prem"], busy.details["on_prem"]
    assert a["amortised_usd"] == pytest.approx(b["amortised_usd"] * high / low)
    assert a["cost_usd"] > b["cost_usd"] and a["usd_per_million_tokens"] > b["usd_per_million_tokens"]


def test_cost_per_million_tokens():
    money = training_economics(inputs())
    assert money.details["cloud"]["usd_per_million_tokens"] == pytest.approx(money.cost_usd / 1e5)


def test_no_budget_means_no_time_cost_or_energy():
    money = training_economics(inputs(budget=Budget()))
    assert money.time_to_train_s is None and money.cost_usd is None and money.energy_kwh is None
    assert 0 < money.reliability.goodput <= 1


def test_a_run_failures_never_let_finish_has_no_time_or_cost_and_valid_json():
    import json
    awful = training_economics(inputs(failures=FailureModel(1.0, 3600.0, 3600.0)))
    assert awful.reliability.goodput < 1e-9 and awful.time_to_train_s > 1e9 * awful.details["ideal_time_s"]
    hopeless = training_economics(inputs(failures=FailureModel(100.0, 3600.0, 3600.0)))   # exp() overflows
    assert hopeless.reliability.goodput == 0.0
    assert hopeless.time_to_train_s is None and hopeless.cost_usd is None
    json.dumps(hopeless.as_json(), allow_nan=False)
    json.dumps(hopeless.reliability.as_json(), allow_nan=False)
