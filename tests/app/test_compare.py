"""scalesim compare: table, plots, Pareto front, Monte-Carlo wins, HTML report."""

import json

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.result import pareto_front


def scenario(tmp_path, name, node, **training):
    data = {"name": name, "cluster": {"node": node, "gpus": 2}, "model": "gpt2-124m",
            "training": {"precision": "bf16", "seq_len": 256, "global_batch": 8, "micro_batch": 2, "tokens": 1e8,
                         **training}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def designs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    return [scenario(tmp, "two-4090", "rtx4090-pcie-8"), scenario(tmp, "two-h100", "dgx-h100")]


@pytest.fixture(scope="module")
def compared(designs, tmp_path_factory):
    out = tmp_path_factory.mktemp("plots")
    report = out / "report.html"
    result = CliRunner().invoke(main, ["compare", *designs, "--json", "--out", str(out), "--samples", "50",
                                       "--report", str(report)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), out, report


def test_json_holds_a_row_and_a_full_run_object_per_design(compared, designs):
    data, _, _ = compared
    assert [r["file"] for r in data["table"]] == designs
    for row, design in zip(data["table"], data["designs"]):
        for key in ("step_time_s", "tokens_per_s", "mfu", "scaling_efficiency", "fits", "time_to_train_s",
                    "cost_usd", "on_prem_cost_usd", "energy_kwh"):
            assert key in row
        assert design["cost_usd"] == row["cost_usd"]
        assert design["economics"]["cloud"]["cost_usd"] == pytest.approx(
            design["economics"]["cloud"]["gpu_hours"] * design["economics"]["cloud"]["gpu_hour_usd"])


def test_the_pareto_front_holds_exactly_the_undominated_options(compared):
    data, _, _ = compared
    options = [(r["time_to_train_s"], r[k], r["scenario"], kind) for r in data["table"]
               for kind, k in (("cloud", "cost_usd"), ("on_prem", "on_prem_cost_usd"))]
    front = {(p["scenario"], p["kind"]) for p in data["pareto_front"]}
    for t, c, name, kind in options:
        dominated = any(t2 <= t and c2 <= c and (t2 < t or c2 < c) for t2, c2, _, _ in options)
        assert ((name, kind) in front) == (not dominated)


def test_pareto_front_function():
    assert pareto_front([(1, 1), (2, 2)]) == [0]
    assert pareto_front([(1, 3), (3, 1), (2, 2), (3, 3)]) == [0, 1, 2]


def test_plots_are_written_as_pngs(compared):
    data, out, _ = compared
    for name in ("scaling", "time_cost", "pareto", "breakdown"):
        path = out / f"{name}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
        assert data["plots"][name] == str(path)


def test_monte_carlo_wins_add_up_and_repeat_with_the_seed(compared, designs, tmp_path):
    data, _, _ = compared
    for shares in data["uncertainty"]["wins"].values():
        assert sum(shares) == pytest.approx(1.0)
    again = CliRunner().invoke(main, ["compare", *designs, "--json", "--no-plots", "--samples", "50"])
    assert json.loads(again.stdout)["uncertainty"] == data["uncertainty"]


def test_report_is_one_self_contained_page(compared):
    _, _, report = compared
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") == 4
    assert "src=\"http" not in html and "<script" not in html
    assert "Llama 3" in html and "Young" in html          # assumptions carry their sources


def test_a_bad_file_exits_2_without_a_traceback(designs):
    result = CliRunner().invoke(main, ["compare", designs[0], "no/such.yaml"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_designs_that_train_different_models_are_refused_naming_the_key(tmp_path, designs):
    other = scenario(tmp_path, "bigger", "dgx-h100")
    data = yaml.safe_load(open(other))
    data["model"] = "gpt2-350m"
    open(other, "w").write(yaml.safe_dump(data))
    refused = CliRunner().invoke(main, ["compare", designs[0], other, "--no-plots"])
    assert refused.exit_code == 2 and "model" in refused.output and "Traceback" not in refused.output
    allowed = CliRunner().invoke(main, ["compare", designs[0], other, "--no-plots", "--json",
                                        "--allow-different-work"])
    assert allowed.exit_code == 0, allowed.output


def test_a_design_that_does_not_fit_is_never_on_the_pareto_front(designs):
    from dataclasses import replace

    from scalesim.app.compare import compare

    comparison = compare(designs)
    front = {p["scenario"] for p in comparison.pareto()}
    assert front                                     # someone is on it while everything fits
    comparison.results = [replace(r, fits=False) if r.scenario in front else r for r in comparison.results]
    assert not {p["scenario"] for p in comparison.pareto()} & front


def _rows_where_the_misfit_looks_best():
    good = {"file": "a.yaml", "scenario": "fits", "gpus": 2, "gpu": "h100", "fits": True, "plan": "dp2 mb2",
            "memory_per_gpu_bytes": 10e9, "memory_capacity_bytes": 80e9, "step_time_s": 2.0, "tokens_per_s": 100.0,
            "samples_per_s": 1.0, "mfu": 0.3, "scaling_efficiency": 0.9, "time_to_train_s": 2e4, "cost_usd": 200.0,
            "on_prem_cost_usd": 100.0, "usd_per_million_tokens": 0.2, "energy_kwh": 50.0, "goodput": 0.99}
    bad = {**good, "file": "b.yaml", "scenario": "too big", "fits": False, "memory_per_gpu_bytes": 150e9,
           "step_time_s": 1.0, "mfu": 0.6, "scaling_efficiency": 0.95, "time_to_train_s": 1e4, "cost_usd": 100.0,
           "on_prem_cost_usd": 50.0, "usd_per_million_tokens": 0.1, "energy_kwh": 25.0}
    return [good, bad]


def test_the_table_never_bolds_a_design_that_does_not_fit():
    from scalesim.report.comparison import compare_table

    table = compare_table(_rows_where_the_misfit_looks_best())
    misfit = [str(c) for c in table.columns[2]._cells]
    assert not any("[bold]" in c for c in misfit)
    assert any("[bold]" in str(c) for c in table.columns[1]._cells)
    assert any("does not fit" in c for c in misfit)


def test_the_html_report_never_bolds_a_design_that_does_not_fit():
    import re

    from scalesim.report.html import compare_html

    html = compare_html({"table": _rows_where_the_misfit_looks_best(), "pareto_front": [], "designs": []}, {})
    summary = html.split("<h2>Summary</h2>")[1].split("</table>")[0]
    for row in re.findall(r"<tr>(.*?)</tr>", summary)[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        assert "<b>" not in cells[2], row
    assert "<b>" in summary and "does not fit" in summary


def test_the_html_report_keeps_plots_readable_on_a_phone(tmp_path):
    # At 420 px a plot shrunk to the width is unreadable: narrow screens scroll it sideways at
    # a fixed height instead, and the sources column reads as left-aligned prose.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scalesim.report.html import compare_html

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    fig.savefig(tmp_path / "pareto.png")
    plt.close(fig)
    design = {"scenario": "a", "assumptions": [{"input": "PUE", "value": 1.58, "source": "survey"}]}
    html = compare_html({"table": _rows_where_the_misfit_looks_best(), "pareto_front": [], "designs": [design]},
                        {"pareto": tmp_path / "pareto.png"})
    assert "<div class='scroll plot'><img" in html
    assert "@media (max-width: 600px)" in html and ".plot img { max-width: none" in html
    assert '<td class="src">survey</td>' in html


def test_compare_search_runs_each_design_at_the_best_plan_sweep_search_finds(designs):
    from scalesim.scenario import load_scenario
    from scalesim.app.sweep import run_sweep

    result = CliRunner().invoke(main, ["compare", *designs, "--search", "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for row, design in zip(data["table"], data["designs"]):
        scenario_, file = load_scenario(design["file"])
        (alone,) = run_sweep(scenario_, file, [2], search=True)["best"]
        assert design["plan"]["searched"] and design["plan"]["label"] == alone["plan"] == row["plan"]
        assert row["fits"] and row["step_time_s"] == pytest.approx(alone["step_time_s"])


def test_search_true_in_a_scenario_searches_that_design_only(designs, tmp_path):
    data = yaml.safe_load(open(designs[1]))
    searched = tmp_path / "searched.yaml"
    searched.write_text(yaml.safe_dump({**data, "search": True}))
    result = CliRunner().invoke(main, ["compare", designs[0], str(searched), "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    own, best = json.loads(result.stdout)["designs"]
    assert not own["plan"]["searched"] and best["plan"]["searched"] and best["plan"]["found"]


def test_no_plots_with_a_report_leaves_no_plot_files(designs, tmp_path, monkeypatch):
    """The page embeds its plots; with --no-plots they are drawn for it alone, not left in plots/compare."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["compare", *designs, "--no-plots", "--report", "r.html"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "plots").exists() and "plots:" not in result.output
    assert (tmp_path / "r.html").read_text().count("<img ") == 4


def test_a_different_token_budget_is_named_as_the_yaml_writes_it():
    # "training.tokens: 10000000000.0 in a.yaml but 135000000000.0": zeros to count, for 1e10 and 1.35e11
    from scalesim.app.compare import check_same_work
    from scalesim.errors import InputError
    from scalesim.scenario import Scenario

    def design(tokens):
        return Scenario.model_validate({"name": "d", "cluster": {"node": "dgx-h100"}, "model": "gpt2-350m",
                                        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 64,
                                                     "tokens": tokens}})

    with pytest.raises(InputError) as refused:
        check_same_work([(design(1.0e10), "a.yaml"), (design(1.35e11), "b.yaml")])
    assert "training.tokens: 1e+10 in a.yaml but 1.35e+11" in str(refused.value)
