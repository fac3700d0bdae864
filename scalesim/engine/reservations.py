"""Calls that find their links free, timed by formula until another flow touches them.

A phase whose flows form one bundle (engine/flow_bundles.py) and start on links no
active flow uses runs, while nothing else starts on those links, at the one rate its
bundle had the last time it ran alone (memoised: the same multiset of paths and caps
gets the same max-min rates, fairshare.max_min_rates): it ends at its start plus
size / rate, the time the fluid network would give it. So the network need not hold
it: `reserve` notes its links and sets one timer for its end. If a flow starts on any
of those links before then, `_materialize` puts the bundle into the network in the
state it would be in (the bytes it has moved at its rate since its start) before the
newcomer joins it, and from then on the network plays it as any other. A phase
reserved during its latency (its flows not started yet) starts for real when the
latency is over.

The times are the fluid network's to within float rounding: where a reserved call
becomes part of the network its start order among the bundles is later than if it had
been there all along, which can change simultaneous completions' order and rates' last
bits (1e-15 relative), never the physics.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappush

import simpy

from scalesim.engine.flow_bundles import Bundle, Call, Prepared
from scalesim.engine.stretches import timer_at


@dataclass(slots=True, eq=False)
class Reserved:
    """A phase running alone on its links: when its flows start, at what rate, when it ends."""

    prepared: Prepared
    flows_s: float          # its latency over: its flows start
    rate: float
    finish_s: float         # flows_s + size / rate, as the network projects it
    end_s: float            # when the network's timer for it would fire
    timer: simpy.Event      # fires then: the caller waits for it
    live: bool = True


class Reservations:
    """The network's side (mixed into `network.FluidNetwork`, which holds `_reserved` and
    `_reserved_mask`): reserve a phase's links, end it, or hand it to the network."""

    def reserve(self, flows, latency_s: float = 0.0) -> Reserved | None:
        """These flows (after `latency_s`) run alone by formula, if they can (one bundle, its rate
        memoised as one rate, its links free): the caller waits for the reservation's `timer`, which
        fires when they have arrived. None: the caller plays the phase the general way."""
        known = self._prepared_for(flows)
        if len(known.bundles) != 1 or self._reserved_mask & known.mask:
            return None
        spec = known.bundles[0]
        plan = self._rates_memo.get(spec.key)
        rate = plan[spec.key] if plan is not None else None
        if rate.__class__ is not float or not rate > 0:
            return None
        mask = known.mask
        for group in self._groups:
            if group.mask & mask:
                return None
        env = self.env
        flows_s = env._now + latency_s if latency_s > 0 else env._now
        finish_s = flows_s + spec.size_bytes / rate
        end_s = flows_s + max(finish_s - flows_s, 0.0)
        timer = timer_at(env, end_s)
        reserved = Reserved(known, flows_s, rate, finish_s, end_s, timer)
        self._reserved.append(reserved)
        self._reserved_mask |= mask
        # First of the timer's callbacks: the books are kept before the waiting walk goes on.
        timer.callbacks.append(lambda _event: self._reserved_end(reserved))
        return reserved

    def _reserved_end(self, reserved: Reserved) -> None:
        if not reserved.live:
            return          # handed to the network: it finishes the call
        self._drop_reserved(reserved)
        known = reserved.prepared
        spec = known.bundles[0]
        self.bytes_sent += known.sent_bytes
        self.bytes_delivered += known.instant_bytes
        self.bytes_delivered += spec.size_bytes * len(spec.ords)

    def _drop_reserved(self, reserved: Reserved) -> None:
        reserved.live = False
        self._reserved.remove(reserved)
        if not self._reserved:
            self._reserved_mask = 0
            return
        mask = 0
        for other in self._reserved:
            mask |= other.prepared.mask
        self._reserved_mask = mask

    def _materialize(self, mask: int) -> None:
        """Flows are about to start on `mask`: the reserved phases they touch join the network."""
        now = self.env._now
        for reserved in [r for r in self._reserved if r.prepared.mask & mask]:
            self._drop_reserved(reserved)
            # Whoever waits for its timer (the walk that plays it) waits for the network's event instead.
            done = self.env.event()
            done.callbacks, reserved.timer.callbacks = reserved.timer.callbacks[1:], []
            if now < reserved.flows_s:        # still in its latency: its flows start then, for real
                timer = timer_at(self.env, reserved.flows_s)
                timer.callbacks.append(lambda _event, r=reserved, d=done: self.start(r.prepared.flows, d))
                continue
            known = reserved.prepared
            self.bytes_sent += known.sent_bytes
            self.bytes_delivered += known.instant_bytes
            spec = known.bundles[0]
            base = self._seq + 1
            self._seq += known.timed
            # What `_alone` made of it when its flows started, and has held since.
            b = Bundle(base + spec.ords[0], base + spec.ords[-1], base, spec.ords, spec.paths, spec.mask,
                       spec.size_bytes, spec.size_bytes, Call(done, known.timed), spec.key, spec.cap,
                       reserved.rate, reserved.flows_s, reserved.finish_s, 1)
            b.group = self._new_group([b], spec.mask)
            heappush(self._heap, (b.finish_s, b.seq, b.version, b))
