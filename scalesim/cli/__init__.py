"""The `scalesim` command. It only wires: parse arguments, call app/, print through report/.

Exit codes (DESIGN.md): 0 simulated and fits; 3 simulated but does not fit;
2 bad input, with one message on stderr naming the file, the key and what is
allowed. The commands live by concern: training_commands (run, compare, sweep),
serving_commands (serve), measurement_commands (collective, validate, calibrate),
catalog_commands (hardware, topologies, topology show, models); wiring and
progress_bars hold what they share.
"""

from __future__ import annotations

import click

from scalesim.cli.catalog_commands import hardware, models, topologies, topology
from scalesim.cli.measurement_commands import calibrate, collective, validate
from scalesim.cli.serving_commands import serve
from scalesim.cli.training_commands import compare, run, sweep
from scalesim.cli.wiring import EXIT_INTERRUPTED, interrupts_stop_once


class _Commands(click.Group):
    """The command group; Ctrl-C in any command: one line on stderr and exit 130 (not click's
    "Aborted!" and 1), a repeated SIGINT while it stops ignored (`interrupts_stop_once`)."""

    def invoke(self, ctx: click.Context):
        with interrupts_stop_once():
            try:
                return super().invoke(ctx)
            except KeyboardInterrupt:
                click.echo("interrupted", err=True)
                raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="scalesim")
def main() -> None:
    """Simulate multi-GPU deep-learning training clusters.

    Write a scenario (cluster, model, training, parallel plan) and run it to
    get the step time and where it goes, memory fit, scaling efficiency, time
    and cost to train, and plots. See scenarios/ for examples.

    \b
    Start here:
      scalesim run scenarios/8x4090-ddp.yaml
      scalesim compare scenarios/8x4090-ddp.yaml scenarios/8xa100-ddp.yaml --report page.html
      scalesim sweep scenarios/8xh100-ddp.yaml --gpus 8,16,32 --search
    README's "A buyer's questions" gives a command for each question.
    """


for _command in (run, collective, validate, serve, calibrate, hardware, topologies, topology, models, compare,
                 sweep):
    main.add_command(_command)

__all__ = ["main"]
