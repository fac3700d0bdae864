"""Progress on stderr: rich bars on a terminal, a heartbeat line every 10 s on a pipe or a file."""

from __future__ import annotations

import contextlib

from scalesim.app.heartbeat import lines as heartbeat_lines
from scalesim.cli.wiring import err_console


def progress(disabled: bool):
    """A rich progress wrapper on stderr (off when piped or printing JSON)."""
    from rich.progress import track

    def wrap(items, description: str, total: int):
        if not err_console.is_terminal and total:
            return heartbeat_lines(items, description, total)
        return track(items, description=description, total=total, console=err_console,
                     disable=disabled or total == 0)
    return wrap


def validation_progress(disabled: bool):
    """`validate`'s progress over the case groups simulated."""
    from rich.progress import track

    def wrap(finished, total: int):
        if not err_console.is_terminal:
            finished = heartbeat_lines(finished, "validating: case groups simulated", total)
        return track(finished, total=total, description="validating", console=err_console,
                     disable=disabled or not err_console.is_terminal)
    return wrap


def sweep_progress(disabled: bool):
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
            yield from heartbeat_lines(items, description if description.endswith("plans") else
                                       f"{description} plans", total)
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


@contextlib.contextmanager
def stop_on_sigterm():
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
