"""`collective`, `validate` and `calibrate`: the simulator against nccl-tests and published measurements."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.core import ParameterSource

from scalesim.cli.progress_bars import validation_progress
from scalesim.cli.wiring import (Choice, catalog_from, catalog_option, exact_option, exact_simulation_context,
                                 friendly_errors)
from scalesim.outputs import check_output_dir, check_output_file
from scalesim.report.tables import make_console


@click.command("collective")
@click.option("--topology", "topologies_", multiple=True, required=True,
              help="Node design name, topology .yaml, or scenario .yaml (its cluster). Repeat to compare.")
@click.option("--op", default="all_reduce", show_default=True,
              type=Choice(["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                 "all_to_all", "send_recv"]),
              help="Collective operation.")
@click.option("--gpus", type=click.IntRange(min=1), default=None, help="GPUs taking part [all of the node].")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes of the design, joined by --fabric.")
@click.option("--fabric", default=None, help="Network link between nodes (e.g. ib-ndr, roce-400g, eth-100g).")
@click.option("--nics-per-node", type=click.IntRange(min=1), default=None,
              help="NICs per node on the fabric [the design's NIC count].")
@click.option("--fabric-topology", type=Choice(["fat-tree", "rail-optimized", "single-switch"]),
              default="rail-optimized", show_default=True, help="How the NICs are switched.")
@click.option("--p2p", type=Choice(["on", "off"]), default=None,
              help="Force PCIe peer-to-peer on or off [the design's setting]. With it on, NCCL still "
                   "copies through host memory between GPUs on different Intel/ARM root ports "
                   "(host.cpu; P2P only below a PCIe switch there).")
@click.option("--algo", default="auto", show_default=True, callback=lambda _c, _p, v: v.lower(),
              help="Algorithm: auto | ring | tree | nvls | nvls_tree | hierarchical | direct (auto: the fastest, as NCCL's "
                   "tuner; any case, as NCCL_ALGO's Ring).")
@click.option("--protocol", default="auto", show_default=True, callback=lambda _c, _p, v: v.lower(),
              help="NCCL protocol: auto | ll | ll128 | simple (any case, as NCCL_PROTO's LL128 or Simple).")
@click.option("--sizes", default="8:8G", show_default=True,
              help="Buffer sizes in bytes: MIN:MAX doubling (nccl-tests -b/-e/-f 2) or a list like 1M,64M "
                   "(K, M, G: 2^10, 2^20, 2^30 as in nccl-tests; KB, MB, GB decimal).")
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
    from scalesim.app.collective_bench import (as_option, build_topology, parse_sizes, resolve_design, thin_sizes,
                                               time_collective)
    from scalesim.errors import InputError
    from scalesim.limits import answer_budget, check_collective_size, collective_sizes_that_fit
    from scalesim.report.collective import collective_plot, collective_table
    from scalesim.topology import Fabric

    check_output_file(plot, "--plot", suffixes=(".png", ".svg"))
    size_list = parse_sizes(sizes)
    default_sizes = click.get_current_context().get_parameter_source("sizes") == ParameterSource.DEFAULT
    catalog = catalog_from(catalog_dirs)
    rows = []
    for spec in topologies_:
        net = None
        if fabric is not None:
            design_nics = None if nics_per_node else (resolve_design(spec, catalog)[0].nics.count or None)
            net = Fabric(fabric, nics_per_node or design_nics or 8, fabric_topology, nics_given=nics_per_node is not None)
        topo = build_topology(spec, p2p=None if p2p is None else p2p == "on", nodes=nodes, fabric=net,
                              catalog=catalog)
        n = gpus or len(topo.gpus)
        with answer_budget():
            fit = collective_sizes_that_fit(min(n, len(topo.gpus)))
            if default_sizes and 1 <= fit < len(size_list):
                size_list = thin_sizes(size_list, fit)
                click.echo(f"note: {len(size_list)} of the default sizes on {n:,} GPUs (all of them would take over "
                           "the answer budget, ~10 s); give --sizes to choose", err=True)
            check_collective_size(min(n, len(topo.gpus)), len(size_list))
        try:
            rows += [time_collective(topo, op, n, size, algo, protocol) for size in size_list]
        except InputError as exc:
            raise as_option(exc) from None
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        collective_plot(rows, plot)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    make_console().print(collective_table(rows))
    if plot is not None:
        click.echo(f"plot: {plot}")


@click.command("validate")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"cases": [{id, category, predicted, measured, error}], "summary": {...}}.')
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the log-log parity plot (predicted vs measured, ±10% band).")
@click.option("--only", type=Choice(["collective", "single_gpu", "multi_gpu", "multi_node", "serving"]),
              default=None,
              help="Run one category.")
@click.option("--fast", is_flag=True, help="Run the quick subset only (what the test suite runs).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes that simulate cases side by side [CPU count]; 1 runs them in this process. "
                   "Results are the same for any number.")
@catalog_option
@exact_option
@friendly_errors
def validate(as_json: bool, plot: Path | None, only: str | None, fast: bool, workers: int | None,
             catalog_dirs, exact: bool) -> None:
    """Predict every published measurement in validation/ and report the error.

    Errors are (predicted - measured) / measured. Cases the simulator cannot
    run yet are listed as skipped with the reason; the summary counts only
    simulated cases. Cases a constant was fitted on (`fitted_on:`) count in an
    "in_sample" row of their own, disputed measurements and supplementary ones
    (beyond the reference set) in theirs: the category and overall figures are
    over the reference cases no constant saw.
    """
    from scalesim.app.loso import evaluate_all, loso_summaries
    from scalesim.app.validate import load_cases, summaries
    from scalesim.report.validation import parity_plot, validation_json, validation_table

    from scalesim.limits import check_workers

    check_workers(workers)
    check_output_file(plot, "--plot", suffixes=(".png", ".svg", ".pdf"))
    cases = [c for c in load_cases() if (only is None or c.category == only) and (not fast or c.fast)]
    catalog = catalog_from(catalog_dirs)       # e.g. a calibrated folder, checked against every case
    with exact_simulation_context(exact):
        outcomes, replaced = evaluate_all(cases, catalog, workers, validation_progress(as_json))
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


@click.command("calibrate")
@click.argument("measurements", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("calibrated-catalog"),
              show_default=True,
              help="Folder to write the calibrated gpus.yaml / links.yaml into (pass it later with --catalog).")
@click.option("--link", default=None,
              help="Link to fit from nccl-tests logs [the one bounding the run; a named one that does not bound "
                   "it gives way to the one that does, and calibrate says so].")
@click.option("--gpu", default=None, help="GPU the GEMM / bandwidth CSV was measured on [the logs' GPU].")
@click.option("--topology", default=None, help="Node design the logs ran on [the built-in design of their GPU].")
@click.option("--op", default=None, type=Choice(["all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                      "reduce", "all_to_all", "send_recv"]),
              help="Collective of logs that do not say (e.g. all_reduce).")
@catalog_option
@friendly_errors
def calibrate(measurements, out, link, gpu, topology, op, catalog_dirs) -> None:
    """Fit link and GPU efficiencies to your own measurements and write a catalog folder.

    MEASUREMENTS: nccl-tests / rccl-tests output as printed (all_reduce_perf,
    all_gather_perf, ...), and .csv files of GEMM and memory-bandwidth results
    with the header kind,precision,m,n,k,value (see scalesim/app/measurements.py):
    value in TFLOP/s for gemm rows, GB/s (10^9 B/s) for membw rows. Prints
    every figure against the catalog before and after. A folder --out that
    holds a gpus.yaml or links.yaml calibrate did not write is refused.
    """
    from scalesim.app.calibrate import calibrate as fit
    from scalesim.report.calibration import calibration_tables

    check_output_dir(out, "--out")
    fits = fit(list(measurements), out=out, link=link, gpu=gpu, topology=topology, op=op,
               catalog=catalog_from(catalog_dirs))
    for notice in (f.notice for f in fits if f.notice):
        click.echo(notice)
    console = make_console()
    for table in calibration_tables(fits):
        console.print(table)
    click.echo(f"wrote {out}: use it with --catalog {out} (or SCALESIM_CATALOG={out})")
