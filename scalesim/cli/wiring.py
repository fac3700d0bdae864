"""What every command shares: exit codes, the one-line error for bad input, --catalog, status lines.

Exit codes (DESIGN.md): 0 simulated and fits; 3 simulated but does not fit;
2 bad input, with one message on stderr naming the file, the key and what is
allowed; 130 interrupted (128 + SIGINT, as shells report Ctrl-C).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import json
import math
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import click
from rich.console import Console

from scalesim.app.heartbeat import heartbeat
from scalesim.errors import InputError, did_you_mean
from scalesim.paths import PACKAGE
from scalesim.program import no_collection

EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3
EXIT_INTERRUPTED = 130          # 128 + SIGINT, as shells report Ctrl-C

err_console = Console(stderr=True)


class ScenarioFile(click.Path):
    """A scenario .yaml argument; given none, the error suggests `examples` (files in the repository's
    scenarios/) and where the examples are."""

    def __init__(self, *examples: str):
        super().__init__(dir_okay=False, path_type=Path)
        self.examples = examples or ("8x4090-ddp.yaml",)

    def convert(self, value, param, ctx):
        path = Path(value)
        if path.is_dir():           # `scalesim run scenarios`: name the files it holds
            found = sorted(p.name for p in path.glob("*.yaml"))
            shown = [f for f in self.examples if f in found] or found[:3]
            hint = (f"give one of its {len(found)} .yaml files, e.g. {' '.join(str(path / f) for f in shown)}"
                    if found else "give a scenario .yaml file")
            self.fail(f"{value} is a directory; {hint}", param, ctx)
        return super().convert(value, param, ctx)

    def get_missing_message(self, param, ctx) -> str:
        folder = PACKAGE.parent / "scenarios"
        if not folder.is_dir():         # installed from a wheel: the examples stay in the repository
            return (f"Give a scenario .yaml, e.g. `scalesim {ctx.info_name} {' '.join(self.examples)}` with "
                    "the examples from the scenarios/ folder of the scalesim repository (README.md describes the keys)")
        shown = Path(os.path.relpath(folder)) if folder.is_relative_to(Path.cwd()) else folder
        where = "this folder" if shown == Path(".") else f"{shown}{os.sep}"
        files = " ".join(str(shown / e) for e in self.examples)
        return (f"Give a scenario .yaml, e.g. `scalesim {ctx.info_name} {files}`; "
                f"the examples are in {where} (README.md describes the keys)")


class Choice(click.Choice):
    """click.Choice whose error adds the closest choice ("Did you mean 'all_reduce'?" for
    `--op allreduce`; errors.did_you_mean). Every choice option of the CLI uses it."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            hint = did_you_mean(value, [str(c) for c in self.choices])
            if not hint:
                raise
            self.fail(f"{exc.message}{hint}", param, ctx)


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
            if exc.errno == errno.EPIPE:
                raise               # `| head` closed the pipe: click's main exits quietly (1)
            click.echo(f"error: {exc.filename or 'output'}: {exc.strerror or exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper


@contextlib.contextmanager
def interrupts_stop_once():
    """Ctrl-C stops the command once. The first SIGINT raises KeyboardInterrupt; a repeat within a
    second (`timeout -s INT` signals the process and then its group; a double key press) is
    ignored while the command cleans up, so no second KeyboardInterrupt escapes as a traceback
    (from Python's shutdown, say); a later one ends the process at once (exit 130). After an
    interrupt the handler stays: the process is about to exit. Off the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    first: list[float] = []

    def again(_signum, _frame):
        if time.monotonic() - first[0] > 1.0:
            os.write(2, b"interrupted again: stopping now\n")
            os._exit(EXIT_INTERRUPTED)

    def interrupt(_signum, _frame):
        first.append(time.monotonic())
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        if not first:
            signal.signal(signal.SIGINT, previous)


def catalog_option(fn):
    """--catalog DIR (repeatable): folders of gpus.yaml / links.yaml layered over the built-in catalog."""
    return click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(path_type=Path),
                        help="Folder of your own gpus.yaml / links.yaml entries, taking precedence over the "
                             "built-in catalog (repeatable; after $SCALESIM_CATALOG's).")(fn)


def exact_option(fn):
    """--exact: play every task of every step, without fast-forwarding repeating periods."""
    return click.option("--exact", is_flag=True,
                        help="Play every task of every step: no fast-forward of repeating periods (pipeline "
                             "micro-batches, identical layers). Same results within 1e-9; slower.")(fn)


def wall_time_option(fn):
    """--max-seconds: the wall-time limit of a command that simulates steps (run, compare)."""
    return click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
                        help="Stop with exit 2 when simulating takes longer than this (wall time) [no limit]; "
                             "steps estimated beyond 10 s of simulation are refused unless this allows longer.")(fn)


def exact_simulation_context(exact: bool):
    """The block plays every step whole when `exact` (--exact)."""
    from scalesim.engine.fast_forward import exact_simulation

    return exact_simulation(exact)


def catalog_from(dirs):
    """The catalog of the --catalog folders (and $SCALESIM_CATALOG's) over the built-in one."""
    from scalesim.hardware.user_catalog import catalog_for

    return catalog_for(dirs)


def slug(text: str) -> str:
    """A file name's stem made safe as a folder name (plots/<slug>/)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "scenario"


def status(as_json: bool, what: str):
    """A spinner on a terminal; on a pipe or a file, a line on stderr every 10 s."""
    if not err_console.is_terminal:
        return heartbeat(what)
    return err_console.status("simulating...", spinner="dots") if not as_json else contextlib.nullcontext()


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while one command answers, and what is loaded then
    and what the command made left out of its later passes (gc.freeze): at 32,768 GPUs its passes
    over the millions of objects of a step cost 0.3-1 s, and one more pass, ~0.5 s, followed the
    command when it was turned back on. The command's cycles (~30 MB there) are kept until the
    process ends, which for the command line is right after. Only the command line pauses the
    collector for a whole command; the library, around a step's build and play (program.no_collection,
    whose count of holders across threads this shares). It is on again on the way out."""
    gc.freeze()
    with no_collection():       # the same holders as the library's blocks, which may run on other threads
        try:
            yield
        finally:
            gc.freeze()


def contract_json(data) -> str:
    """A command's JSON answer. A number that came out infinite or undefined (an overflow the input checks
    let through) is refused naming where it sits, exit 2: `Infinity` and `NaN` are not JSON (fuzz15)."""
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except ValueError:
        where = ", ".join(_non_finite(data)[:5])
        raise InputError(f"the result's {where} came out infinite or undefined: an input lies far outside what "
                         "scalesim models; check the scenario's numbers and its catalog entries' (--catalog)") from None


def _non_finite(data, path: str = "") -> list[str]:
    """Key paths of the non-finite numbers in a JSON-like value."""
    if isinstance(data, float):
        return [] if math.isfinite(data) else [path or "value"]
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    return [p for k, v in items for p in _non_finite(v, f"{path}.{k}" if path else str(k))]
