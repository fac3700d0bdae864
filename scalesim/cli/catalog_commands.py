"""`hardware`, `topologies`, `topology show` and `models`: what the catalogs hold."""

from __future__ import annotations

import json
from pathlib import Path

import click

from scalesim.cli.wiring import catalog_from, catalog_option, friendly_errors
from scalesim.outputs import check_output_file
from scalesim.report.tables import make_console


@click.command("hardware")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Print the catalog (or NAME's entry) as JSON (every field and source).")
@catalog_option
@friendly_errors
def hardware(name: str | None, as_json: bool, catalog_dirs) -> None:
    """List the GPUs and links in the hardware catalog, or show NAME in full with its sources.

    All FLOP/s are dense peaks (never 2:4 sparse); GeForce fp16/bf16 are at the
    FP32-accumulate rate that mixed-precision training uses. Link bandwidth is
    per direction.
    """
    from scalesim.report.catalogs import hardware_detail, hardware_json, hardware_tables

    catalog = catalog_from(catalog_dirs)
    if as_json:
        click.echo(json.dumps(hardware_json(catalog, name), indent=2))
        return
    console = make_console()
    for table in [hardware_detail(name, catalog)] if name else hardware_tables(catalog):
        console.print(table)


@click.command("topologies")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def topologies(as_json: bool) -> None:
    """List the node designs shipped in topologies/."""
    from scalesim.report.catalogs import topologies_json, topologies_table

    if as_json:
        click.echo(json.dumps(topologies_json(), indent=2))
        return
    make_console().print(topologies_table())


@click.group("topology")
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
    catalog = catalog_from(catalog_dirs)
    design = load_node_design(name, catalog=catalog)
    graph = build_node_graph(design, catalog=catalog)
    make_console().print(topology_description(design, graph))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        topology_plot(graph, out, f"{design.name}")
        click.echo(f"drawing: {out}")


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def models(as_json: bool) -> None:
    """List the models in the zoo with their parameter counts and sources."""
    from scalesim.models import model_info
    from scalesim.report.catalogs import models_table

    if as_json:
        click.echo(json.dumps(model_info(), indent=2))
        return
    make_console().print(models_table())
