"""Fluid flows over shared links, played out in simpy time.

Whenever a flow starts or ends, every active flow's rate is recomputed by
max-min fair sharing, and the next completion is scheduled. A timer that was
overtaken by a newer change is ignored (generation counter), so the event
queue never needs cancelling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import simpy

from scalesim.fairshare import max_min_rates

# A flow is done when less than this fraction of it (or a millibyte) remains:
# floating-point residue must not schedule zero-length timers forever.
_DONE_FRACTION = 1e-9
_DONE_BYTES = 1e-3


@dataclass(slots=True)
class _ActiveFlow:
    links: tuple[int, ...]
    size_bytes: float
    remaining_bytes: float
    done: simpy.Event
    cap: float = float("inf")
    rate: float = 0.0


@dataclass
class FluidNetwork:
    env: simpy.Environment
    capacity_bytes_per_s: Sequence[float]
    bytes_sent: float = 0.0
    bytes_delivered: float = 0.0
    _active: list[_ActiveFlow] = field(default_factory=list)
    _last_update_s: float = 0.0
    _generation: int = 0

    def start(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> simpy.Event:
        """Start flows (links, size_bytes, rate cap) together; the event fires when all have arrived."""
        events = []
        self._advance()
        for links, size, cap in flows:
            done = self.env.event()
            events.append(done)
            self.bytes_sent += size
            if size <= 0 or (not links and cap == float("inf")):
                self.bytes_delivered += size
                done.succeed()
                continue
            self._active.append(_ActiveFlow(tuple(links), size, size, done, cap))
        self._reschedule()
        return self.env.all_of(events)

    def _advance(self) -> None:
        dt = self.env.now - self._last_update_s
        if dt > 0:
            for f in self._active:
                f.remaining_bytes -= f.rate * dt
        self._last_update_s = self.env.now

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._active:
            return
        caps = [f.cap for f in self._active]
        rates = max_min_rates([f.links for f in self._active], self.capacity_bytes_per_s,
                              caps if any(c != float("inf") for c in caps) else None)
        next_s = float("inf")
        for f, rate in zip(self._active, rates):
            f.rate = rate
            if rate > 0:
                next_s = min(next_s, max(f.remaining_bytes, 0.0) / rate)
        if next_s == float("inf"):
            raise RuntimeError("flows are stalled on zero-capacity links")
        generation = self._generation
        timer = self.env.timeout(next_s)
        timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        still = []
        for f in self._active:
            if f.remaining_bytes <= max(_DONE_FRACTION * f.size_bytes, _DONE_BYTES):
                self.bytes_delivered += f.size_bytes
                f.done.succeed()
            else:
                still.append(f)
        self._active = still
        self._reschedule()
