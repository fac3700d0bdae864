"""The `scalesim` command. It only wires: parse arguments, call the runner, report.

Exit codes (DESIGN.md): 0 simulated and fits; 3 simulated but does not fit;
2 bad input, with one message on stderr naming the file, the key and what is
allowed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
from pathlib import Path

import click
from rich.console import Console

from scalesim.report.tables import make_console

from scalesim.errors import InputError
from scalesim.app.heartbeat import heartbeat, lines as heartbeat_lines
from scalesim.limits import MAX_SAMPLES
from scalesim.outputs import check_output_dir, check_output_file

EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3

err_console = Console(stderr=True)


def friendly_errors(fn):
    """Turn InputError into one line on stderr and exit 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except OSError as exc:      # an output the checks could not foresee (a full disk, a race)
            click.echo(f"error: {exc.filename or 'output'}: {exc.strerror or exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper


def catalog_option(fn):
    """--catalog DIR (repeatable): folders of gpus.yaml / links.yaml layered over the built-in catalog."""
    return click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(path_type=Path),
                        help="Folder of your own gpus.yaml / links.yaml entries, taking precedence over the "
                             "built-in catalog (repeatable; after $SCALESIM_CATALOG's).")(fn)


def _catalog(dirs):
    from scalesim.hardware.user_catalog import catalog_for

    return catalog_for(dirs)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "scenario"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="scalesim")
def main() -> None:
    """Simulate multi-GPU deep-learning training clusters.

    Write a scenario (cluster, model, training, parallel plan) and run it to
    get the step time and where it goes, memory fit, scaling efficiency, time
    and cost to train, and plots. See scenarios/ for examples.
    """


@main.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the contract) on stdout.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for plots [plots/<scenario file name>/].")
@click.option("--plots/--no-plots", default=True, help="Write the timeline and scaling plots.")
@click.option("--scaling/--no-scaling", default=True,
              help="Simulate 1..N GPUs for the scaling curve (the 1-GPU point is always simulated).")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the step as a Chrome trace-event JSON file (open it in ui.perfetto.dev).")
@click.option("--samples", type=click.IntRange(min=0, max=MAX_SAMPLES), default=0, show_default=True,
              help="Monte-Carlo samples over efficiency, failure rate and prices: P10/P50/P90 of time and cost.")
@click.option("--seed", type=int, default=None, help="Monte-Carlo seed [the scenario's uncertainty.seed, 0].")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop with exit 2 when simulating takes longer than this (wall time) [no limit].")
@catalog_option
@friendly_errors
def run(scenario_file: Path, as_json: bool, out: Path | None, plots: bool, scaling: bool, trace: Path | None,
        samples: int, seed: int | None, max_seconds: float | None, catalog_dirs) -> None:
    """Simulate one training step of SCENARIO_FILE and report it.

    Exit code 0 when the plan fits in memory, 3 when it does not (the step is
    still simulated), 2 for bad input.
    """
    from scalesim.limits import time_limit
    from scalesim.report.tables import print_table, result_table
    from scalesim.app.setup import prepare
    from scalesim.app.run import run_setup
    from scalesim.scenario import load_scenario

    directory = out or Path("plots") / slug(scenario_file.stem)
    check_output_dir(directory if plots else None, "--out")
    check_output_file(trace, "--trace", inputs=[scenario_file])
    scenario, file = load_scenario(scenario_file)
    catalog = _catalog(catalog_dirs)
    setup = prepare(scenario, file, catalog=catalog)
    counts = _scaling_counts(setup.gpus) if (scaling and plots) else []
    with _status(as_json, f"simulating {scenario_file} (and, if it does not fit, the changes that would fit)"), \
            time_limit(max_seconds):
        result = run_setup(setup, scaling_counts=counts)
    if plots:
        from scalesim.report.plots import scaling_plot, timeline_plot

        directory.mkdir(parents=True, exist_ok=True)
        written = [timeline_plot(result.timeline, directory / "timeline.png",
                                 f"{scenario.name}: one step")]
        if result.scaling:
            written.append(scaling_plot(result.scaling, directory / "scaling.png",
                                        f"{scenario.name}: scaling efficiency"))
    uncertainty = _run_uncertainty(result, scenario, samples, seed) if samples else None
    if trace is not None:
        from scalesim.report.trace import write_trace

        write_trace(result.timeline, trace, title=scenario.name, gpus=result.gpus)
    if as_json:
        data = result.to_json()
        if uncertainty is not None:
            data["uncertainty"] = uncertainty
        click.echo(json.dumps(data, indent=2))
    else:
        print_table(result_table(result))
        if uncertainty is not None:
            from scalesim.report.tables import uncertainty_table

            print_table(uncertainty_table(uncertainty))
        if plots:
            click.echo("plots: " + ", ".join(str(p) for p in written))
        if trace is not None:
            click.echo(f"trace: {trace} (open in ui.perfetto.dev)")
    if not result.fits:
        sys.exit(EXIT_DOES_NOT_FIT)


def _status(as_json: bool, what: str):
    """A spinner on a terminal; on a pipe or a file, a line on stderr every 10 s."""
    if not err_console.is_terminal:
        return heartbeat(what)
    return err_console.status("simulating...", spinner="dots") if not as_json else contextlib.nullcontext()


def _run_uncertainty(result, scenario, samples: int, seed: int | None) -> dict:
    from scalesim.app.uncertainty import Spread, monte_carlo

    mc = monte_carlo([result.inputs], [Spread.from_spec(scenario.uncertainty)], samples=samples,
                     seed=scenario.uncertainty.seed if seed is None else seed)
    return {"samples": mc["samples"], "seed": mc["seed"], "spreads": mc["spreads"][0], **mc["designs"][0]}


def _scaling_counts(gpus: int) -> list[int]:
    """GPU counts for the scaling curve: every count up to 8, then powers of two.

    Beyond 64 GPUs, 1 and every fourth power of two up to the full size
    (1, ..., N/64, N/16, N/4, N), so big clusters stay quick to sweep; counts
    the plan cannot use (not a multiple of tp x pp x cp) are skipped later.
    """
    if gpus > 64:
        counts = sorted({1} | {gpus // 4**i for i in range(4) if gpus // 4**i >= 8})
        return counts
    counts = list(range(1, min(gpus, 8) + 1))
    k = 16
    while k < gpus:
        counts.append(k)
        k *= 2
    if gpus not in counts:
        counts.append(gpus)
    return counts


@main.command()
@click.option("--topology", "topologies_", multiple=True, required=True,
              help="Node design name, topology .yaml, or scenario .yaml (its cluster). Repeat to compare.")
@click.option("--op", default="all_reduce", show_default=True,
              type=click.Choice(["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                 "all_to_all", "send_recv"]),
              help="Collective operation.")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs taking part [all of the node].")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes of the design, joined by --fabric.")
@click.option("--fabric", default=None, help="Network link between nodes (e.g. ib-ndr, roce-400g, eth-100g).")
@click.option("--nics-per-node", type=click.IntRange(min=1), default=None,
              help="NICs per node on the fabric [the design's NIC count].")
@click.option("--fabric-topology", type=click.Choice(["fat-tree", "rail-optimized", "single-switch"]),
              default="rail-optimized", show_default=True, help="How the NICs are switched.")
@click.option("--p2p", type=click.Choice(["on", "off"]), default=None,
              help="Force PCIe peer-to-peer on or off [the design's setting].")
@click.option("--algo", default="auto", show_default=True,
              help="Algorithm: auto | ring | tree | nvls | hierarchical | direct (auto: the fastest, as NCCL's tuner).")
@click.option("--protocol", default="auto", show_default=True, help="NCCL protocol: auto | ll | ll128 | simple.")
@click.option("--sizes", default="8:8G", show_default=True,
              help="Buffer sizes: MIN:MAX doubling (nccl-tests -b/-e/-f 2) or a list like 1M,64M.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list (the contract).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw bus bandwidth against size (.png or .svg).")
@catalog_option
@friendly_errors
def collective(topologies_, op, gpus, nodes, fabric, nics_per_node, fabric_topology, p2p, algo, protocol,
               sizes, as_json, plot, catalog_dirs) -> None:
    """Simulate a collective like nccl-tests does: time, algbw and busbw per size.

    algbw = size / time; busbw = algbw x (2(n-1)/n for all_reduce, (n-1)/n for
    reduce_scatter, all_gather and all_to_all, 1 otherwise), nccl-tests'
    definitions, so busbw is comparable to link bandwidth.
    """
    from scalesim.app.collective_bench import build_topology, parse_sizes, time_collective
    from scalesim.report.collective import collective_plot, collective_table

    from scalesim.topology import Fabric

    check_output_file(plot, "--plot", suffixes=(".png", ".svg"))
    size_list = parse_sizes(sizes)
    catalog = _catalog(catalog_dirs)
    rows = []
    for spec in topologies_:
        net = None
        if fabric is not None:
            design_nics = None if nics_per_node else _design_nics(spec, catalog)
            net = Fabric(fabric, nics_per_node or design_nics or 8, fabric_topology)
        topo = build_topology(spec, p2p=None if p2p is None else p2p == "on", nodes=nodes, fabric=net,
                              catalog=catalog)
        n = gpus or len(topo.gpus)
        rows += [time_collective(topo, op, n, size, algo, protocol) for size in size_list]
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        collective_plot(rows, plot)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    make_console().print(collective_table(rows))
    if plot is not None:
        click.echo(f"plot: {plot}")


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print {"cases": [{id, category, predicted, measured, error}], "summary": {...}}.')
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the log-log parity plot (predicted vs measured, ±10%% band).")
@click.option("--only", type=click.Choice(["collective", "single_gpu", "multi_gpu", "multi_node", "serving"]),
              default=None,
              help="Run one category.")
@click.option("--fast", is_flag=True, help="Run the quick subset only (what the test suite runs).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes that simulate cases side by side [CPU count]; 1 runs them in this process. "
                   "Results are the same for any number.")
@catalog_option
@friendly_errors
def validate(as_json: bool, plot: Path | None, only: str | None, fast: bool, workers: int | None,
             catalog_dirs) -> None:
    """Predict every published measurement in validation/ and report the error.

    Errors are (predicted - measured) / measured. Cases the simulator cannot
    run yet are listed as skipped with the reason; the summary counts only
    simulated cases. Cases a constant was fitted on (`fitted_on:`) count in an
    "in_sample" row of their own, disputed measurements and supplementary ones
    (beyond the reference set) in theirs: the category and overall figures are
    over the reference cases no constant saw.
    """
    from rich.progress import track

    from scalesim.app.executors import completed, open_pool, parse_executor
    from scalesim.app.loso import load_fits, loso_jobs, loso_summaries
    from scalesim.report.validation import parity_plot, validation_json, validation_table
    from scalesim.app.validate import evaluate_group, groups_of, load_cases, summaries

    check_output_file(plot, "--plot", suffixes=(".png", ".svg", ".pdf"))
    cases = [c for c in load_cases() if (only is None or c.category == only) and (not fast or c.fast)]
    # Cases that share a scenario are simulated once; the long ones go first so that the pool
    # never waits on one at the end.
    groups = sorted(groups_of(cases), key=lambda g: all(cases[i].fast for i in g))
    catalog = _catalog(catalog_dirs)       # e.g. a calibrated folder, checked against every case
    # Then the leave-one-source-out re-predictions: each fitted source's cases without its fits.
    jobs = [(g, catalog) for g in groups] + loso_jobs(cases, catalog, load_fits())
    outcomes: list = [None] * len(cases)
    replaced: dict = {}
    with open_pool(parse_executor("local", workers)) as pool:
        finished = completed(pool, evaluate_group, [([cases[i] for i in g], cat) for g, cat in jobs])
        if not err_console.is_terminal:
            finished = heartbeat_lines(finished, "validating: case groups simulated", len(jobs))
        for k, group_outcomes in track(finished, total=len(jobs), description="validating", console=err_console,
                                       disable=as_json or not err_console.is_terminal):
            if isinstance(group_outcomes, BaseException):
                raise group_outcomes
            for i, outcome in zip(jobs[k][0], group_outcomes):
                if k < len(groups):
                    outcomes[i] = outcome
                else:
                    replaced[i] = outcome
    rows = summaries(outcomes)
    loso = loso_summaries(outcomes, replaced)
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        parity_plot(outcomes, plot)
    if as_json:
        click.echo(json.dumps(validation_json(outcomes, rows, loso, replaced), indent=2))
        return
    console = make_console()
    for table in validation_table(outcomes, rows, loso):
        console.print(table)
    if plot is not None:
        click.echo(f"plot: {plot}")


@main.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the serving contract) on stdout.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for plots [plots/<scenario file name>/].")
@click.option("--rates", default=None, help="Request rates to sweep, e.g. 1,2,4,8 (requests/s, Poisson).")
@click.option("--search/--no-search", default=True,
              help="Without --rates, bisect for the highest rate meeting the SLO [on].")
@click.option("--plots/--no-plots", default=True, help="Write the latency plots (when rates were simulated).")
@friendly_errors
def serve(scenario_file: Path, as_json: bool, out: Path | None, rates: str | None, search: bool,
          plots: bool) -> None:
    """Simulate LLM serving of SCENARIO_FILE under load: latency, throughput, KV cache, cost.

    Exit code 0 when the model fits, 3 when it does not, 2 for bad input.
    """
    from scalesim.report.serving import latency_throughput_plot, percentiles_plot, serving_table, sweep_table
    from scalesim.app.serve import rate_list, serve as run_serve
    from scalesim.serving.spec import load_serving_scenario

    check_output_dir(out or Path("plots") / slug(scenario_file.stem) if plots else None, "--out")
    scenario, file = load_serving_scenario(scenario_file)
    with err_console.status("simulating...", spinner="dots") if not as_json else contextlib.nullcontext():
        result = run_serve(scenario, file, rates=rate_list(rates) if rates else None, search=search)
    written = []
    if plots and result.get("sweep"):
        directory = out or Path("plots") / slug(scenario_file.stem)
        written = [latency_throughput_plot([result], directory / "latency-throughput.png"),
                   percentiles_plot(result, directory / "latency-percentiles.png")]
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        make_console().print(serving_table(result))
        if result.get("sweep"):
            make_console().print(sweep_table(result))
        if written:
            click.echo("plots: " + ", ".join(str(p) for p in written))
    if not result["fits"]:
        sys.exit(EXIT_DOES_NOT_FIT)


def _design_nics(spec: str, catalog=None) -> int | None:
    from scalesim.app.collective_bench import resolve_design

    return resolve_design(spec, catalog)[0].nics.count or None


@main.command()
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write the calibrated gpus.yaml / links.yaml into (pass it later with --catalog).")
@click.option("--link", default=None, help="Link to fit from nccl-tests logs [the one bounding the run].")
@click.option("--gpu", default=None, help="GPU the GEMM / bandwidth CSV was measured on [the logs' GPU].")
@click.option("--topology", default=None, help="Node design the logs ran on [the built-in design of their GPU].")
@click.option("--op", default=None, help="Collective of logs that do not say (e.g. all_reduce).")
@catalog_option
@friendly_errors
def calibrate(measurements, out, link, gpu, topology, op, catalog_dirs) -> None:
    """Fit link and GPU efficiencies to your own measurements and write a catalog folder.

    MEASUREMENTS: nccl-tests / rccl-tests output as printed (all_reduce_perf,
    all_gather_perf, ...), and .csv files of GEMM and memory-bandwidth results
    with the header kind,precision,m,n,k,value (see scalesim/app/measurements.py).
    Prints every figure against the catalog before and after.
    """
    from scalesim.app.calibrate import calibrate as fit
    from scalesim.report.calibration import calibration_tables

    check_output_dir(out, "--out")
    fits = fit(list(measurements), out=out, link=link, gpu=gpu, topology=topology, op=op,
               catalog=_catalog(catalog_dirs))
    console = make_console()
    for table in calibration_tables(fits):
        console.print(table)
    click.echo(f"wrote {out}: use it with --catalog {out} (or SCALESIM_CATALOG={out})")


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as JSON (every field and source).")
@catalog_option
@friendly_errors
def hardware(name: str | None, as_json: bool, catalog_dirs) -> None:
    """List the GPUs and links in the hardware catalog, or show NAME in full with its sources.

    All FLOP/s are dense peaks (never 2:4 sparse); GeForce fp16/bf16 are at the
    FP32-accumulate rate that mixed-precision training uses. Link bandwidth is
    per direction.
    """
    from scalesim.report.catalogs import hardware_detail, hardware_json, hardware_tables

    catalog = _catalog(catalog_dirs)
    if as_json:
        click.echo(json.dumps(hardware_json(catalog), indent=2))
        return
    console = make_console()
    for table in [hardware_detail(name, catalog)] if name else hardware_tables(catalog):
        console.print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def topologies(as_json: bool) -> None:
    """List the node designs shipped in topologies/."""
    from scalesim.report.catalogs import topologies_json, topologies_table

    if as_json:
        click.echo(json.dumps(topologies_json(), indent=2))
        return
    make_console().print(topologies_table())


@main.group()
def topology() -> None:
    """Inspect one node design."""


@topology.command("show")
@click.argument("name")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw the design to this file (.png or .svg).")
@catalog_option
@friendly_errors
def topology_show(name: str, out: Path | None, catalog_dirs) -> None:
    """Describe NAME (a built-in name or a .yaml file) and optionally draw it."""
    from scalesim.report.catalogs import topology_description
    from scalesim.report.plots import topology_plot
    from scalesim.topology import build_node_graph, load_node_design

    check_output_file(out, "--out", suffixes=(".png", ".svg"), inputs=[name])
    catalog = _catalog(catalog_dirs)
    design = load_node_design(name, catalog=catalog)
    graph = build_node_graph(design, catalog=catalog)
    make_console().print(topology_description(design, graph))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        topology_plot(graph, out, f"{design.name}")
        click.echo(f"drawing: {out}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def models(as_json: bool) -> None:
    """List the models in the zoo with their parameter counts and sources."""
    from scalesim.report.catalogs import models_table
    from scalesim.models import model_info

    if as_json:
        click.echo(json.dumps(model_info(), indent=2))
        return
    make_console().print(models_table())


def _progress(disabled: bool):
    """A rich progress wrapper on stderr (off when piped or printing JSON)."""
    from rich.progress import track

    def wrap(items, description: str, total: int):
        if not err_console.is_terminal and total:
            return heartbeat_lines(items, description, total)
        return track(items, description=description, total=total, console=err_console,
                     disable=disabled or total == 0)
    return wrap


@main.command()
@click.argument("scenario_files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"table", "pareto_front", "uncertainty", "plots", "designs": [run --json of each]}.')
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the plots [plots/compare/].")
@click.option("--plots/--no-plots", default=True, help="Write the comparison plots.")
@click.option("--samples", type=click.IntRange(min=0, max=MAX_SAMPLES), default=0, show_default=True,
              help="Monte-Carlo samples: P10/P90 of time and cost, and how often each design wins.")
@click.option("--seed", type=int, default=None, help="Monte-Carlo seed [the first scenario's uncertainty.seed, 0].")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML page (table, plots, assumptions and sources).")
@click.option("--search", is_flag=True,
              help="Compare each design at its best fitting plan (the sweep --search search at its GPU count) "
                   "[each scenario's own plan, or search: true in the scenario].")
@click.option("--rank", "rank_by", type=click.Choice(["time", "cost"]), default="time", show_default=True,
              help="With --search: the best plan is the fastest to train or the cheapest (cloud).")
@click.option("--allow-different-work", is_flag=True,
              help="Rank designs whose model, sequence length or token budget differ (refused otherwise).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table as CSV (one row per design).")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop with exit 2 when simulating takes longer than this (wall time) [no limit].")
@catalog_option
@friendly_errors
def compare(scenario_files, as_json, out, plots, samples, seed, report, search, rank_by, allow_different_work,
            csv_path, max_seconds, catalog_dirs) -> None:
    """Simulate several designs and compare them side by side.

    Table: step time, throughput, MFU, scaling efficiency, memory fit, time to
    train, cloud and on-premises cost, energy. Plots: scaling efficiency
    against GPU count, time and cost bars, cost against time with the Pareto
    front, step breakdown. Exit 3 when a design does not fit in memory (it is
    then never bold nor on the Pareto front); exit 2 when the designs train
    different models, sequence lengths or token budgets (--allow-different-work
    ranks them anyway). With --search each design runs at its best fitting plan.
    """
    from scalesim.app.compare import budget_text, compare as run_compare
    from scalesim.limits import time_limit
    from scalesim.report.comparison import compare_plots, compare_table
    from scalesim.app.serve_compare import is_serving_file

    check_output_file(report, "--report", suffixes=(".html", ".htm"), inputs=scenario_files)
    check_output_dir(out or Path("plots") / "compare" if plots or report is not None else None, "--out")
    if any(is_serving_file(f) for f in scenario_files):
        _compare_serving(scenario_files, as_json, out, plots)
        return
    check_output_file(csv_path, "--csv", suffixes=(".csv",), inputs=scenario_files)
    with time_limit(max_seconds):
        comparison = run_compare(list(scenario_files), scaling_counts=_scaling_counts, samples=samples, seed=seed,
                                 progress=lambda items: _progress(as_json)(items, "simulating designs", len(items)),
                                 catalog=_catalog(catalog_dirs), search=search, rank_by=rank_by,
                                 allow_different_work=allow_different_work, search_progress=_sweep_progress(as_json))
    rows = comparison.rows()
    if csv_path is not None:
        from scalesim.report.comparison import write_compare_csv

        write_compare_csv(rows, csv_path)
    written = {}
    if plots or report is not None:
        directory = out or Path("plots") / "compare"
        budgets = {budget_text(s) for s in comparison.scenarios}
        written = compare_plots(rows, directory, budget=budgets.pop() if len(budgets) == 1 else "",
                                uncertainty=comparison.uncertainty)
        comparison.plots = {k: str(v) for k, v in written.items()}
    data = comparison.to_json()
    if report is not None:
        from scalesim.report.html import write_compare_html

        write_compare_html(data, written, report)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        make_console().print(compare_table(rows, comparison.uncertainty))
        front = data["pareto_front"]
        if front:
            click.echo("Pareto front (nothing else is both faster and cheaper): "
                       + "; ".join(f"{p['scenario']} ({p['kind'].replace('_', '-')})" for p in front))
        if written:
            click.echo("plots: " + ", ".join(str(p) for p in written.values()))
        if report is not None:
            click.echo(f"report: {report}")
    if not all(r.fits for r in comparison.results):
        sys.exit(EXIT_DOES_NOT_FIT)


def _compare_serving(scenario_files, as_json: bool, out: Path | None, plots: bool) -> None:
    """`compare` over serving scenarios: each design at its highest rate under the SLO."""
    from scalesim.report.serving import serving_compare_table, serving_pareto_plot
    from scalesim.app.serve_compare import compare_serving, is_serving_file

    training = [str(f) for f in scenario_files if not is_serving_file(f)]
    if training:
        raise InputError("cannot compare training and serving scenarios together; give only serving scenarios "
                         "(with a serving: block) or only training ones", file=training[0], key="serving")
    with err_console.status("simulating...", spinner="dots") if not as_json else contextlib.nullcontext():
        data = compare_serving(list(scenario_files))
    if plots:
        directory = out or Path("plots") / "compare"
        path = serving_pareto_plot(data["table"], data["pareto_front"], directory / "serving-pareto.png")
        data["plots"] = {"pareto": str(path)}
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        make_console().print(serving_compare_table(data["table"]))
        click.echo("Pareto front (nothing else is both cheaper and faster): "
                   + "; ".join(f"{p['scenario']} ({p['kind']})" for p in data["pareto_front"]))
        if plots:
            click.echo(f"plots: {data['plots']['pareto']}")
    if not all(r["fits"] for r in data["table"]):
        sys.exit(EXIT_DOES_NOT_FIT)


@main.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--gpus", "gpu_counts", required=True, help="GPU counts, e.g. 8,16,32,64.")
@click.option("--search", is_flag=True,
              help="Search dp/tp/pp, ZeRO stage, micro-batch and recompute for each count [the scenario's plan].")
@click.option("--rank", "rank_by", type=click.Choice(["time", "cost"]), default="time", show_default=True,
              help="Rank plans by time to train or by cloud cost.")
@click.option("--exhaustive", is_flag=True,
              help="Simulate every fitting plan (default: skip plans a lower ZeRO stage and lighter recompute beat).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for sweep.csv, sweep.json, points.jsonl and best.png "
                   "[plots/sweep/<scenario file name>/].")
@click.option("--json", "as_json", is_flag=True, help="Print the whole sweep as JSON on stdout.")
@click.option("--plots/--no-plots", default=True, help="Draw the best plan per GPU count.")
@click.option("--executor", "executor_name", default="local", show_default=True, metavar="local|dask-local|dask://HOST:PORT",
              help="Where the simulations run: local (a process pool on this machine), dask-local (a Dask "
                   "LocalCluster started for this run) or dask://HOST:PORT (a running Dask scheduler, whose "
                   "workers need scalesim installed and the files the scenario names). "
                   "Dask needs: pip install 'scalesim[dask]'. Results are the same on every executor.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes for local and dask-local [the CPU count]; 1 runs in this process "
                   "(for debuggers). A dask:// cluster has its own.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted sweep: plans already simulated in <out>/points.jsonl (same scenario "
                   "and plan) are reused, not simulated again; failed ones are retried.")
@click.option("--force", is_flag=True, help="Start over: discard an existing <out>/points.jsonl.")
@catalog_option
@friendly_errors
def sweep(scenario_file, gpu_counts, search, rank_by, exhaustive, out, as_json, plots, executor_name, workers,
          resume, force, catalog_dirs) -> None:
    """Simulate SCENARIO_FILE at several GPU counts; with --search, find and rank the plans that fit.

    The cluster grows by whole nodes of the scenario's node design; without
    cluster.fabric the nodes are joined by the design's own NICs (said in
    the output). The global batch stays the scenario's. Plans the simulator
    cannot run are listed as not available with the reason, never as best;
    a plan that raises an unexpected error is listed as failed with it.

    Each simulated plan is appended to <out>/points.jsonl as it finishes. An
    existing points file is never overwritten silently: give --resume to
    continue that sweep (Ctrl-C is safe) or --force to start over.
    Exit 3 when no GPU count has a plan that runs and fits.
    """
    from scalesim.app.executors import parse_executor
    from scalesim.app.points_file import NAME, PointsFile
    from scalesim.report.sweep_table import best_plan_plot, sweep_table
    from scalesim.scenario import load_scenario
    from scalesim.app.sweep import parse_counts, run_sweep, write_outputs

    counts = parse_counts(gpu_counts)
    executor = parse_executor(executor_name, workers)
    scenario, file = load_scenario(scenario_file)
    directory = out or Path("plots") / "sweep" / slug(scenario_file.stem)
    check_output_dir(directory, "--out")
    with PointsFile(directory / NAME, scenario, file, resume=resume, force=force) as points, _stop_on_sigterm():
        try:
            result = run_sweep(scenario, file, counts, search=search, rank_by=rank_by, exhaustive=exhaustive,
                               progress=_sweep_progress(as_json), executor=executor, points_file=points,
                               catalog=_catalog(catalog_dirs))
        except KeyboardInterrupt:
            click.echo(f"interrupted: the plans simulated so far are in {points.path}; "
                       "run the same command with --resume to continue", err=True)
            sys.exit(EXIT_INTERRUPTED)
    if points.reused and not as_json:
        click.echo(f"resumed: {points.reused} plans reused from {points.path}", err=True)
    files = write_outputs(result, directory)
    files["points"] = points.path
    if plots:
        files["plot"] = best_plan_plot(result, directory / "best.png")
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        make_console().print(sweep_table(result))
        for note in result["notes"]:
            click.echo(f"note: {note}")
        click.echo("results: " + ", ".join(str(p) for p in files.values()))
    if not any(b.get("status") == "ok" for b in result["best"]):
        sys.exit(EXIT_DOES_NOT_FIT)          # no GPU count has a plan that runs and fits


EXIT_INTERRUPTED = 130          # 128 + SIGINT, as shells report Ctrl-C


@contextlib.contextmanager
def _stop_on_sigterm():
    """A job scheduler's SIGTERM stops the sweep like Ctrl-C: workers stopped, points file kept."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sweep_progress(disabled: bool):
    """A rich progress bar on stderr: plans done of all, plans per second, time left (off when piped
    or printing JSON)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("- plans/s" if speed is None else f"{speed:.2f} plans/s", style="progress.data.speed")

    def wrap(items, description: str, total: int):
        if not err_console.is_terminal and total:
            yield from heartbeat_lines(items, f"{description} plans", total)
            return
        if disabled or total == 0:
            yield from items
            return
        with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      RateColumn(), TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(),
                      TextColumn("left"),
                      console=err_console) as bar:
            yield from bar.track(items, total=total, description=description)
    return wrap


if __name__ == "__main__":
    main()
