"""compare --samples: a design that does not fit never "wins" a sample (it cannot run), and the
table says so in its uncertainty rows instead of a share or a P10-P90 range."""

from scalesim.app.uncertainty import _wins
from scalesim.report.comparison import summary_rows
from scalesim.report.formatting import NO_FIT


def test_a_design_that_does_not_fit_wins_no_sample():
    outcomes = [[{"time_to_train_s": 1.0}, {"time_to_train_s": 5.0}],      # faster, but does not fit
                [{"time_to_train_s": 2.0}, {"time_to_train_s": 3.0}]]
    assert _wins(outcomes, "time_to_train_s") == [0.5, 0.5]
    assert _wins(outcomes, "time_to_train_s", competing=[False, True]) == [0.0, 1.0]


def test_the_uncertainty_rows_say_does_not_fit_for_such_a_design():
    def row(name, fits):
        return {"scenario": name, "gpus": 8, "gpu": "x", "fits": fits, "memory_per_gpu_bytes": 1,
                "memory_capacity_bytes": 2, "step_time_s": 1.0, "tokens_per_s": 1.0, "samples_per_s": 1.0, "mfu": 0.5,
                "scaling_efficiency": 0.9, "time_to_train_s": 10.0, "cost_usd": 1.0, "on_prem_cost_usd": 1.0,
                "energy_kwh": 1.0, "goodput": 0.99}
    spread = {"p10": 9.0, "p50": 10.0, "p90": 11.0}
    unc = {"samples": 10, "designs": [{"time_to_train_s": spread, "cost_usd": spread, "on_prem_cost_usd": spread}] * 2,
           "wins": {"time_to_train_s": [0.0, 1.0], "cost_usd": [0.0, 1.0], "on_prem_cost_usd": [0.0, 1.0]}}
    rows = {name: values for name, values, _best, _low in summary_rows([row("a", False), row("b", True)], unc)}
    for name in ("fastest in", "cheapest (cloud) in", "cheapest (owned) in"):
        assert rows[name][0] == NO_FIT and rows[name][1] == "100.0%"
    assert NO_FIT in rows["cloud cost P10–P90"][0] and NO_FIT not in rows["cloud cost P10–P90"][1]
