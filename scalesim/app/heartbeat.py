"""Progress where there is no terminal: one line on stderr at least every 10 s.

A rich progress bar draws nothing when stderr is a file or a CI log, so long
commands would print nothing for minutes. `lines` wraps an iterable the way
the bar does and, from a background thread, writes "what: done of total
(elapsed)" every `interval` seconds until the work ends; work shorter than
the interval prints nothing. Wiring level, like `cli`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO

INTERVAL_S = 10.0


class Beat:
    """What is being done and how far it is; read by the heartbeat thread."""

    def __init__(self, what: str, total: int | None = None) -> None:
        self.what, self.total, self.done = what, total, 0
        self.start = time.monotonic()

    def line(self) -> str:
        count = f": {self.done} of {self.total}" if self.total else ""
        return f"{self.what}{count} ({time.monotonic() - self.start:.0f} s elapsed)"


@contextmanager
def heartbeat(what: str, total: int | None = None, stream: TextIO | None = None,
              interval: float = INTERVAL_S) -> Iterator[Beat]:
    """Write the beat's line to `stream` [stderr] every `interval` seconds while the block runs."""
    beat = Beat(what, total)
    stop = threading.Event()
    out = stream or sys.stderr

    def loop() -> None:
        while not stop.wait(interval):
            print(beat.line(), file=out, flush=True)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield beat
    finally:
        stop.set()
        thread.join()


def lines(items: Iterable, what: str, total: int, stream: TextIO | None = None,
          interval: float = INTERVAL_S) -> Iterator:
    """`items`, with a heartbeat line every `interval` seconds saying how many of `total` are done."""
    with heartbeat(what, total, stream, interval) as beat:
        for item in items:
            yield item
            beat.done += 1
