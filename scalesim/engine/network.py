"""Fluid flows over shared links, played out in simpy time.

Whenever flows start or end, the rates of the flows that share links with
them (directly or through other flows: their connected component) are
recomputed by max-min fair sharing; flows elsewhere keep their rates, which
are unchanged by construction. Then the next completion is scheduled. A timer
that was overtaken by a newer change is ignored (generation counter), so the
event queue never needs cancelling. Each flow carries its links as a bitmask
(a Python int), so finding a component is a few passes of integer ANDs over
the active flows rather than a graph search.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import simpy

from scalesim.fairshare import max_min_rates

# A flow is done when less than this fraction of it (or a millibyte) remains:
# floating-point residue must not schedule zero-length timers forever.
_DONE_FRACTION = 1e-9
_DONE_BYTES = 1e-3
INF = float("inf")


@dataclass(slots=True, eq=False)
class _Call:
    """The flows one `start` launched: its event fires when the last of them arrives."""
    done: simpy.Event
    pending: int


@dataclass(slots=True, eq=False)
class _ActiveFlow:
    links: tuple[int, ...]
    mask: int                  # bit i set: the flow crosses link i
    size_bytes: float
    remaining_bytes: float
    call: _Call
    cap: float = INF
    rate: float = 0.0


@dataclass
class FluidNetwork:
    env: simpy.Environment
    capacity_bytes_per_s: Sequence[float]
    bytes_sent: float = 0.0
    bytes_delivered: float = 0.0
    _active: list[_ActiveFlow] = field(default_factory=list)
    _masks: dict[int, tuple] = field(default_factory=dict)      # id(links) -> (links, mask)
    _last_update_s: float = 0.0
    _generation: int = 0
    _rates_memo: dict = field(default_factory=dict)

    def start(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> simpy.Event:
        """Start flows (links, size_bytes, rate cap) together; the event fires when all have arrived."""
        call = _Call(self.env.event(), 0)
        added = []
        self._advance()
        masks = self._masks
        for links, size, cap in flows:
            self.bytes_sent += size
            if size <= 0 or (not links and cap == INF):
                self.bytes_delivered += size
                continue
            if type(links) is not tuple:
                links = tuple(links)
            known = masks.get(id(links))
            if known is None or known[0] is not links:
                mask = 0
                for link in links:
                    mask |= 1 << link
                # Holding the tuple keeps its id unique for the run: rate memo keys use it.
                known = masks[id(links)] = (links, mask)
            flow = _ActiveFlow(links, known[1], size, size, call, cap)
            self._active.append(flow)
            added.append(flow)
        call.pending = len(added)
        if not added:
            call.done.succeed()
            return call.done
        self._reschedule(added, 0)
        return call.done

    def _advance(self) -> None:
        dt = self.env.now - self._last_update_s
        if dt > 0:
            for f in self._active:
                f.remaining_bytes -= f.rate * dt
        self._last_update_s = self.env.now

    def _component(self, seeds: Iterable[_ActiveFlow], links_mask: int) -> list[_ActiveFlow]:
        """Active flows connected to the seed flows or links through shared links, in start order."""
        found = set(seeds)
        mask = links_mask
        for f in found:
            mask |= f.mask
        rest = [f for f in self._active if f not in found]
        grew = True
        while grew and rest:
            grew = False
            outside = []
            for f in rest:
                if f.mask & mask:
                    mask |= f.mask
                    found.add(f)
                    grew = True
                else:
                    outside.append(f)
            rest = outside
        return [f for f in self._active if f in found]

    def _reschedule(self, changed: Sequence[_ActiveFlow], freed_links: int) -> None:
        self._generation += 1
        if not self._active:
            return
        group = self._component(changed, freed_links)
        if group:
            # Rates depend only on the flows' paths and caps: the same set of
            # paths (the next bucket of the same collective) reuses them. Paths
            # are the plans' own tuples, alive for the whole run: their ids name them.
            key = tuple((id(f.links), f.cap) for f in group)
            rates = self._rates_memo.get(key)
            if rates is None:
                caps = [f.cap for f in group]
                rates = max_min_rates([f.links for f in group], self.capacity_bytes_per_s,
                                      caps if any(c != INF for c in caps) else None)
                self._rates_memo[key] = rates
            for f, rate in zip(group, rates):
                f.rate = rate
        next_s = INF
        for f in self._active:
            if f.rate > 0:
                next_s = min(next_s, max(f.remaining_bytes, 0.0) / f.rate)
        if next_s == INF:
            raise RuntimeError("flows are stalled on zero-capacity links")
        generation = self._generation
        timer = self.env.timeout(next_s)
        timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        still = []
        freed = 0
        for f in self._active:
            # Done when (almost) nothing is left, or when what is left would take less
            # than the clock can represent at this time (else time would never advance).
            left_s = f.remaining_bytes / f.rate if f.rate > 0 else INF
            if (f.remaining_bytes <= max(_DONE_FRACTION * f.size_bytes, _DONE_BYTES)
                    or self.env.now + left_s == self.env.now):
                self.bytes_delivered += f.size_bytes
                f.call.pending -= 1
                if f.call.pending == 0:
                    f.call.done.succeed()
                freed |= f.mask
            else:
                still.append(f)
        self._active = still
        self._reschedule((), freed)
