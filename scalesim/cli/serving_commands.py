"""`serve`, and `compare` over serving scenarios: LLM serving under load."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from scalesim.cli.wiring import (EXIT_DOES_NOT_FIT, ScenarioFile, catalog_from, catalog_option, contract_json,
                                 friendly_errors, slug, status)
from scalesim.errors import InputError
from scalesim.outputs import check_output_dir
from scalesim.report.tables import make_console


@click.command("serve")
@click.argument("scenario_file", type=ScenarioFile("serve-1x4090-llama3-8b.yaml"))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the serving contract) on stdout.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for plots [plots/<scenario file name>/].")
@click.option("--rates", default=None, help="Request rates to sweep, e.g. 1,2,4,8 (requests/s, Poisson).")
@click.option("--search/--no-search", default=True,
              help="Without --rates, find the highest rate meeting the SLO [on]: doubling and bisection to 5% "
                   "on the first 400 requests (the table's probe rows), then checked with all of them.")
@click.option("--plots/--no-plots", default=True, help="Write the latency plots (when rates were simulated).")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Allow this many seconds of simulation (a load estimated beyond 10 s is refused "
                   "otherwise); stop with exit 2 when simulating takes longer (wall time) [no limit].")
@catalog_option
@friendly_errors
def serve(scenario_file: Path, as_json: bool, out: Path | None, rates: str | None, search: bool,
          plots: bool, max_seconds: float | None, catalog_dirs) -> None:
    """Simulate LLM serving of SCENARIO_FILE under load: latency, throughput, KV cache, cost.

    The first table is the scenario's own load (serving.requests); the rates table, each rate
    simulated (--rates, or the search's). Exit code 0 when the model fits, 3 when it does not, 2 for
    bad input (a mixture-of-experts model among them).
    """
    from scalesim.app.serve import serve as run_serve
    from scalesim.report.serving import latency_throughput_plot, percentiles_plot, serving_table, sweep_table
    from scalesim.serving.spec import load_serving_scenario

    check_output_dir(out or Path("plots") / slug(scenario_file.stem) if plots else None, "--out",
                     files=("latency-throughput.png", "latency-percentiles.png"))
    scenario, file = load_serving_scenario(scenario_file)
    from scalesim.limits import answer_budget, time_limit

    with status(as_json, f"simulating the serving of {scenario_file}"), answer_budget(max_seconds), \
            time_limit(max_seconds):
        result = run_serve(scenario, file, rates=rate_list(rates) if rates else None, search=search,
                           catalog=catalog_from(catalog_dirs))
    written = []
    if plots and result.get("sweep"):
        directory = out or Path("plots") / slug(scenario_file.stem)
        written = [latency_throughput_plot([result], directory / "latency-throughput.png"),
                   percentiles_plot(result, directory / "latency-percentiles.png")]
    if as_json:
        click.echo(contract_json(result))
    else:
        make_console().print(serving_table(result))
        if result.get("sweep"):
            make_console().print(sweep_table(result))
        if written:
            click.echo("plots: " + ", ".join(str(p) for p in written))
    if not result["fits"]:
        sys.exit(EXIT_DOES_NOT_FIT)


def rate_list(text: str) -> list[float]:
    """'1,2,4.5' -> [1.0, 2.0, 4.5], in order, each once; InputError naming --rates otherwise."""
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"expected rates per second separated by commas, e.g. 1,2,4,8 (got {text!r})",
                         key="--rates") from None
    if not rates or any(not math.isfinite(r) or r <= 0 for r in rates):
        raise InputError(f"rates must be positive numbers, e.g. 1,2,4,8 (got {text!r})", key="--rates")
    return sorted(set(rates))


# `compare` options that only a training comparison has: given with serving scenarios they are refused,
# not ignored (a --report asked for was silently not written)
TRAINING_ONLY_OPTIONS = ("report", "samples", "seed", "search", "rank_by", "allow_different_work",
                         "max_seconds", "exact")


def refuse_training_options(ctx: click.Context) -> None:
    """InputError naming the first training-only `compare` option given on the command line."""
    from click.core import ParameterSource

    for param in ctx.command.params:
        if param.name in TRAINING_ONLY_OPTIONS and ctx.get_parameter_source(param.name) != ParameterSource.DEFAULT:
            raise InputError("applies to training scenarios only; a serving comparison takes --json, --out, "
                             "--plots/--no-plots, --csv and --catalog", key=param.opts[0])


def compare_serving(scenario_files, as_json: bool, out: Path | None, plots: bool, catalog=None,
                    csv_path: Path | None = None) -> None:
    """`compare` over serving scenarios: each design at its highest rate under the SLO."""
    from scalesim.app.serve_compare import compare_serving as run_compare_serving, is_serving_file
    from scalesim.report.serving import serving_compare_table, serving_pareto_plot

    training = [str(f) for f in scenario_files if not is_serving_file(f)]
    if training:
        raise InputError("cannot compare training and serving scenarios together; give only serving scenarios "
                         "(with a serving: block) or only training ones", file=training[0], key="serving")
    with status(as_json, f"simulating {len(scenario_files)} serving designs"):
        data = run_compare_serving(list(scenario_files), catalog)
    if csv_path is not None:
        from scalesim.report.comparison import write_compare_csv

        write_compare_csv([{**r, "plan": f"tp={r['plan']['tp']} pp={r['plan']['pp']} {r['plan']['weights']}"}
                           for r in data["table"]], csv_path)
    if plots:
        directory = out or Path("plots") / "compare"
        path = serving_pareto_plot(data["table"], data["pareto_front"], directory / "serving-pareto.png")
        data["plots"] = {"pareto": str(path)}
    if as_json:
        click.echo(contract_json(data))
    else:
        make_console().print(serving_compare_table(data["table"]))
        click.echo("Pareto front (nothing else is both cheaper and faster): "
                   + "; ".join(f"{p['scenario']} ({p['kind']})" for p in data["pareto_front"]))
        if plots:
            click.echo(f"plots: {data['plots']['pareto']}")
    if not all(r["fits"] for r in data["table"]):
        sys.exit(EXIT_DOES_NOT_FIT)
