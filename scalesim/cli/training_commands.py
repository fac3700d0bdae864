"""`run`, `compare` and `sweep`: simulate training steps and print what they cost."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from functools import partial
from pathlib import Path

import click

from scalesim.app.forked import Fed, spare_cpu
from scalesim.cli.progress_bars import progress, stop_on_sigterm, sweep_progress
from scalesim.cli.wiring import (EXIT_DOES_NOT_FIT, EXIT_INTERRUPTED, Choice, ScenarioFile, catalog_from,
                                 catalog_option, collector_paused, contract_json, exact_option, exact_simulation_context,
                                 friendly_errors, slug, status, wall_time_option)
from scalesim.errors import InputError
from scalesim.limits import MAX_SAMPLES
from scalesim.outputs import check_output_dir, check_output_file
from scalesim.report.formatting import unrunnable_reference
from scalesim.report.tables import make_console


@click.command("run")
@click.argument("scenario_file", type=ScenarioFile())
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
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Monte-Carlo seed [the scenario's uncertainty.seed, 0].")
@wall_time_option
@click.option("--report", hidden=True, default=None)    # not run's: said so, pointing to compare's
@catalog_option
@exact_option
@friendly_errors
@collector_paused()
def run(scenario_file: Path, as_json: bool, out: Path | None, plots: bool, scaling: bool, trace: Path | None,
        samples: int, seed: int | None, max_seconds: float | None, report: str | None, catalog_dirs,
        exact: bool) -> None:
    """Simulate one training step of SCENARIO_FILE and report it.

    Exit code 0 when the plan fits in memory, 3 when it does not (the step is
    still simulated), 2 for bad input.

    training.framework (megatron-core, nemo, megatron-deepspeed, deepspeed,
    nanotron, torchtitan, hf-trainer, llm-foundry; null: none) sets the
    defaults its code implies for the keys that describe one framework (the
    gradient-norm host read, Megatron-DeepSpeed's layer sync, kernels, loss,
    FSDP version, ...); keys the scenario writes win. The "framework defaults"
    row (JSON: plan.framework_defaults) lists the keys it set.
    """
    from scalesim.app.run import run_setup
    from scalesim.app.scaling_curve import scaling_counts
    from scalesim.app.setup import prepare
    from scalesim.limits import answer_budget, time_limit
    from scalesim.scenario import load_scenario

    if report is not None:
        raise InputError(f"run writes no HTML page; compare does, for one design or more: "
                         f"scalesim compare {scenario_file} --report {report}", key="--report")
    directory = out or Path("plots") / slug(scenario_file.stem)
    check_output_dir(directory if plots else None, "--out", files=("timeline.png", "scaling.png"))
    check_output_file(trace, "--trace", inputs=[scenario_file])
    scenario, file = load_scenario(scenario_file)
    with answer_budget(max_seconds), exact_simulation_context(exact), contextlib.ExitStack() as children:
        setup = prepare(scenario, file, catalog=catalog_from(catalog_dirs))
        counts = scaling_counts(setup.gpus) if (scaling and plots) else []
        # With a CPU to spare (app/forked.py), the scaling curve is played in a forked process beside
        # the step, and the plots drawn in another, which imports matplotlib meanwhile and gets the
        # step's timeline once it is played, then the curve; else all in turn here. The same numbers
        # and plots.
        fork = spare_cpu()
        plotter = children.enter_context(_plotter(scenario.name, directory, fork)) if plots else None
        on_step = (lambda timeline, cols: plotter.send(_timeline_message(timeline, cols))) if plots else None
        with status(as_json, f"simulating {scenario_file} (and, if it does not fit, the changes that would fit)"), \
                time_limit(max_seconds):
            result = run_setup(setup, scaling_counts=counts, forked=fork, on_step=on_step)
        written = None
        if plotter is not None:
            plotter.send(_scaling_message(result))
            written = plotter.result()
    uncertainty = None
    if samples:
        from scalesim.app.uncertainty import step_uncertainty

        uncertainty = step_uncertainty(result, scenario.uncertainty, samples, seed)
    if trace is not None:
        from scalesim.report.trace import write_trace

        write_trace(result.timeline, trace, title=scenario.name, gpus=result.gpus)
    _print_run(result, uncertainty, written, trace, as_json)
    if not result.fits:
        sys.exit(EXIT_DOES_NOT_FIT)


def _plotter(name: str, directory: Path, fork: bool) -> Fed:
    """The run's plots, drawn by `_draw_plots` in a process forked now (`fork`; else here, when
    their paths are asked for): it imports matplotlib while this one plays the step."""
    return Fed(partial(_draw_plots, name, directory), fork=fork, prepare=_import_plots)


def _import_plots() -> None:
    import scalesim.report.plots  # noqa: F401


def _timeline_message(timeline, cols=None) -> tuple:
    """What the timeline plot needs of the step: its intervals as columns (cheap to pickle; `cols`
    when read already), its end."""
    from scalesim.report.timeline_rows import columns

    return columns(timeline) if cols is None else cols, timeline.end_s


def _scaling_message(result) -> tuple:
    """What the scaling plot needs of the result: the curve's points, and why the 1-GPU run they are
    measured against could not run (or None)."""
    return result.scaling, unrunnable_reference(result.scaling_reference_fits, result.scaling_reference_memory_bytes,
                                                result.memory_capacity_bytes)


def _draw_plots(name: str, directory: Path, receive) -> list[Path]:
    """The timeline plot, then the scaling plot (when the curve has points): receives the step's
    `_timeline_message`, then `_scaling_message`."""
    from scalesim.report.plots import scaling_plot, timeline_columns_plot

    directory.mkdir(parents=True, exist_ok=True)
    cols, end_s = receive()
    written = [timeline_columns_plot(cols, end_s, directory / "timeline.png", f"{name}: one step")]
    scaling, against = receive()
    if scaling:
        written.append(scaling_plot(scaling, directory / "scaling.png", f"{name}: scaling efficiency", against))
    return written


def _print_run(result, uncertainty: dict | None, written: list[Path] | None, trace: Path | None,
               as_json: bool) -> None:
    if as_json:
        data = result.to_json()
        if uncertainty is not None:
            data["uncertainty"] = uncertainty
        click.echo(contract_json(data))
        return
    from scalesim.report.tables import print_table, result_table, uncertainty_table

    print_table(result_table(result))
    if uncertainty is not None:
        print_table(uncertainty_table(uncertainty))
    if written is not None:
        click.echo("plots: " + ", ".join(str(p) for p in written))
    if trace is not None:
        click.echo(f"trace: {trace} (open in ui.perfetto.dev)")


@click.command("compare")
@click.argument("scenario_files", nargs=-1, required=True, type=ScenarioFile("8x4090-ddp.yaml", "8xa100-ddp.yaml"))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"table", "pareto_front", "uncertainty", "plots", "designs": [run --json of each]}.')
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the plots [plots/compare/].")
@click.option("--plots/--no-plots", default=True, help="Write the comparison plots.")
@click.option("--samples", type=click.IntRange(min=0, max=MAX_SAMPLES), default=0, show_default=True,
              help="Monte-Carlo samples: P10/P90 of time and cost, and how often each design wins.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Monte-Carlo seed [the first scenario's uncertainty.seed, 0].")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML page (table, plots, assumptions and sources).")
@click.option("--search", is_flag=True,
              help="Compare each design at its best fitting plan (the sweep --search search at its GPU count) "
                   "[each scenario's own plan, or search: true in the scenario].")
@click.option("--rank", "rank_by", type=Choice(["time", "cost"]), default="time", show_default=True,
              help="With --search: the best plan is the fastest to train or the cheapest (cloud).")
@click.option("--allow-different-work", is_flag=True,
              help="Rank designs whose model, sequence length or token budget differ (refused otherwise).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table as CSV (one row per design).")
@wall_time_option
@catalog_option
@exact_option
@friendly_errors
@collector_paused()
def compare(scenario_files, as_json, out, plots, samples, seed, report, search, rank_by, allow_different_work,
            csv_path, max_seconds, catalog_dirs, exact) -> None:
    """Simulate several designs and compare them side by side.

    Table: step time, throughput, MFU, scaling efficiency, memory fit, time to
    train, cloud and on-premises cost, energy. Plots: scaling efficiency
    against GPU count, time and cost bars, cost against time with the Pareto
    front, step breakdown. Exit 3 when a design does not fit in memory (it is
    then never bold nor on the Pareto front); exit 2 when the designs train
    different models, sequence lengths or token budgets (--allow-different-work
    ranks them anyway). With --search each design runs at its best fitting plan.
    """
    from scalesim.app.compare import compare as run_compare
    from scalesim.app.scaling_curve import scaling_counts
    from scalesim.app.serve_compare import is_serving_file
    from scalesim.cli.serving_commands import compare_serving, refuse_training_options
    from scalesim.limits import answer_budget, time_limit

    check_output_file(report, "--report", suffixes=(".html", ".htm"), inputs=scenario_files)
    serving = any(is_serving_file(f) for f in scenario_files)
    check_output_dir(out or Path("plots") / "compare" if plots else None, "--out",
                     files=("serving-pareto.png",) if serving else ("scaling.png", "time_cost.png", "pareto.png",
                                                                     "breakdown.png"))
    check_output_file(csv_path, "--csv", suffixes=(".csv",), inputs=scenario_files)
    if serving:
        refuse_training_options(click.get_current_context())
        compare_serving(scenario_files, as_json, out, plots, catalog_from(catalog_dirs), csv_path)
        return
    with answer_budget(max_seconds), time_limit(max_seconds), exact_simulation_context(exact):
        comparison = run_compare(list(scenario_files), scaling_counts=scaling_counts, samples=samples, seed=seed,
                                 progress=lambda items: progress(as_json)(items, "simulating designs", len(items)),
                                 catalog=catalog_from(catalog_dirs), search=search, rank_by=rank_by,
                                 allow_different_work=allow_different_work, search_progress=sweep_progress(as_json))
    _compare_outputs(comparison, as_json, out, plots, report, csv_path)
    if not all(r.fits for r in comparison.results):
        sys.exit(EXIT_DOES_NOT_FIT)


def _compare_outputs(comparison, as_json: bool, out: Path | None, plots: bool, report: Path | None,
                     csv_path: Path | None) -> None:
    """Write the CSV, the plots and the HTML page of a comparison, then print it."""
    from scalesim.app.compare import budget_text
    from scalesim.report.comparison import compare_plots, compare_table

    rows = comparison.rows()
    if csv_path is not None:
        from scalesim.report.comparison import write_compare_csv

        write_compare_csv(rows, csv_path)
    written = {}
    budgets = {budget_text(s) for s in comparison.scenarios}
    # --no-plots with --report: the page embeds the plots, drawn in a folder removed afterwards
    with contextlib.nullcontext(out or Path("plots") / "compare") if plots else tempfile.TemporaryDirectory() as where:
        if plots or report is not None:
            written = compare_plots(rows, Path(where), budget=budgets.pop() if len(budgets) == 1 else "",
                                    uncertainty=comparison.uncertainty)
        if plots:
            comparison.plots = {k: str(v) for k, v in written.items()}
        data = comparison.to_json()
        if report is not None:
            from scalesim.report.html import write_compare_html

            write_compare_html(data, written, report)
    written = written if plots else {}
    if as_json:
        click.echo(contract_json(data))
        return
    make_console().print(compare_table(rows, comparison.uncertainty))
    if data["pareto_front"]:
        click.echo("Pareto front (nothing else is both faster and cheaper): "
                   + "; ".join(f"{p['scenario']} ({p['kind'].replace('_', '-')})" for p in data["pareto_front"]))
    if written:
        click.echo("plots: " + ", ".join(str(p) for p in written.values()))
    if report is not None:
        click.echo(f"report: {report}")


@click.command("sweep")
@click.argument("scenario_file", type=ScenarioFile())
@click.option("--gpus", "gpu_counts", required=True, help="GPU counts, e.g. 8,16,32,64.")
@click.option("--search", is_flag=True,
              help="Search dp/tp/pp, ZeRO stage, micro-batch and recompute for each count [the scenario's plan].")
@click.option("--rank", "rank_by", type=Choice(["time", "cost"]), default="time", show_default=True,
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
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Allow plans estimated to take up to this many seconds of simulation together (CPU "
                   "seconds, all workers) [120]: a sweep estimated beyond it is refused before simulating "
                   "(exit 2, naming --gpus or --search), as is any one plan beyond ~1 min.")
@catalog_option
@exact_option
@friendly_errors
def sweep(scenario_file, gpu_counts, search, rank_by, exhaustive, out, as_json, plots, executor_name, workers,
          resume, force, max_seconds, catalog_dirs, exact) -> None:
    """Simulate SCENARIO_FILE at several GPU counts; with --search, find and rank the plans that fit.

    The cluster grows by whole nodes of the scenario's node design; without
    cluster.fabric the nodes are joined by the design's own NICs (said in
    the output). The global batch stays the scenario's. Plans the simulator
    cannot run are listed as not available with the reason, never as best;
    a plan that raises an unexpected error is listed as failed with it.

    Each simulated plan is appended to <out>/points.jsonl as it finishes. An
    existing points file is never overwritten silently: give --resume to
    continue that sweep (Ctrl-C is safe) or --force to start over.
    Progress goes to stderr (a bar on a terminal, a line every 10 s otherwise).
    A sweep whose plans are estimated beyond about 2 minutes of simulation is
    refused before any is simulated (exit 2) unless --max-seconds allows it.
    Exit 3 when no GPU count has a plan that runs and fits.
    """
    from scalesim.app.executors import parse_executor
    from scalesim.app.points_file import NAME, PointsFile
    from scalesim.app.sweep import parse_counts, run_sweep
    from scalesim.limits import SWEEP_SECONDS, answer_budget
    from scalesim.scenario import load_scenario

    counts = parse_counts(gpu_counts)
    executor = parse_executor(executor_name, workers)
    scenario, file = load_scenario(scenario_file)
    directory = out or Path("plots") / "sweep" / slug(scenario_file.stem)
    check_output_dir(directory, "--out", files=("sweep.csv", "sweep.json", "best.png"))
    with PointsFile(directory / NAME, scenario, file, resume=resume, force=force) as points, stop_on_sigterm(), \
            exact_simulation_context(exact), answer_budget(max_seconds, default_seconds=SWEEP_SECONDS):
        try:
            result = run_sweep(scenario, file, counts, search=search, rank_by=rank_by, exhaustive=exhaustive,
                               progress=sweep_progress(as_json), executor=executor, points_file=points,
                               catalog=catalog_from(catalog_dirs))
        except KeyboardInterrupt:
            click.echo(f"interrupted: the plans simulated so far are in {points.path}; "
                       "run the same command with --resume to continue", err=True)
            sys.exit(EXIT_INTERRUPTED)
    if points.reused and not as_json:
        click.echo(f"resumed: {points.reused} plans reused from {points.path}", err=True)
    _sweep_outputs(result, directory, points.path, plots, as_json)
    if not any(b.get("status") == "ok" for b in result["best"]):
        sys.exit(EXIT_DOES_NOT_FIT)          # no GPU count has a plan that runs and fits


def _sweep_outputs(result: dict, directory: Path, points_path: Path, plots: bool, as_json: bool) -> None:
    """Write sweep.csv, sweep.json and the plot of a sweep, then print it."""
    from scalesim.app.sweep import write_outputs
    from scalesim.report.sweep_table import best_plan_plot, sweep_table

    files = write_outputs(result, directory)
    files["points"] = points_path
    if plots:
        files["plot"] = best_plan_plot(result, directory / "best.png")
    if as_json:
        click.echo(contract_json(result))
        return
    make_console().print(sweep_table(result))
    for note in result["notes"]:
        click.echo(f"note: {note}")
    click.echo("results: " + ", ".join(str(p) for p in files.values()))
