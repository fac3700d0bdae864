"""Fluid flows over shared links, played out in simpy time.

Whenever flows start or end, the rates of the flows that share links with
them (directly or through other flows: their connected component) are
recomputed by max-min fair sharing; flows elsewhere keep their rates, which
are unchanged by construction. Then the next completion is scheduled. A timer
that was overtaken by a newer change is ignored (generation counter), so the
event queue never needs cancelling.

Bookkeeping is per component, so an event costs what its component costs,
not what the whole network carries: the active flows are kept in groups (the
connected components, each with the union of its flows' links as an int
bitmask), a flow's remaining bytes are settled only when its rate changes,
and completions come off a heap of projected finish times. Flows of one call
with the same size and cap that get the same rate move in lock-step and are
kept as one bundle (`flow_bundles`): an all-to-all's thousands of flows cost
what its few distinct rates cost.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import simpy

from scalesim.engine.events import succeed, timeout
from scalesim.engine.flow_bundles import (INF, Bundle, Call, Prepared, bundle_specs, member_flows, split_rates,
                                          sub_bundle)
from scalesim.engine.reservations import Reservations
from scalesim.fairshare import max_min_rates

# A flow is done when less than this fraction of it (or a millibyte) remains:
# floating-point residue must not schedule zero-length timers forever.
_DONE_FRACTION = 1e-9
_DONE_BYTES = 1e-3


def _in_start_order(lists: list[list]) -> list:
    """Merge bundle lists that are each in start order (every group's is) into one."""
    if not lists:
        return []
    if len(lists) == 1:
        return list(lists[0])
    return list(heapq.merge(*lists, key=_start_order))


def _start_order(bundle) -> int:
    return bundle.seq


@dataclass(slots=True, eq=False)
class _Group:
    """A connected component of the active flows: they share links, directly or through each other."""
    flows: list[Bundle]
    mask: int


@dataclass
class FluidNetwork(Reservations):
    env: simpy.Environment
    capacity_bytes_per_s: Sequence[float]
    bytes_sent: float = 0.0
    bytes_delivered: float = 0.0
    _groups: set = field(default_factory=set)
    _heap: list = field(default_factory=list)                    # (finish_s, seq, version, bundle)
    _masks: dict[int, tuple] = field(default_factory=dict)      # id(links) -> (links, mask)
    _prepared: dict[int, Prepared] = field(default_factory=dict)  # id(flows) -> what start derives from them
    _sub_keys: dict[tuple, int] = field(default_factory=dict)   # (bundle key, positions) -> sub-bundle key
    _keys: int = 0
    _seq: int = 0
    _generation: int = 0
    _timer_at: float | None = None      # when the live timer (of this generation) fires
    _rates_memo: dict = field(default_factory=dict)
    _shapes: dict = field(default_factory=dict)      # rates of large components by shape (fairshare.shape)
    _reserved: list = field(default_factory=list)    # phases running alone by formula (engine/reservations.py)
    _reserved_mask: int = 0

    def start(self, flows: Sequence[tuple[tuple[int, ...], float, float]], done: simpy.Event | None = None
              ) -> simpy.Event:
        """Start flows (links, size_bytes, rate cap) together; the event (`done`, or a new one) fires
        when all have arrived.

        A caller that starts the same flows again (the next bucket of a collective) may pass the
        same sequence object: what is derived from it (masks, bundles, rate-memo keys) is kept per object.
        """
        call = Call(self.env.event() if done is None else done, 0)
        now = self.env._now
        known = self._prepared_for(flows)
        if self._reserved_mask & known.mask:
            self._materialize(known.mask)
        self.bytes_sent += known.sent_bytes
        self.bytes_delivered += known.instant_bytes
        call.pending = known.timed
        if not known.timed:
            succeed(call.done)
            return call.done
        base = self._seq + 1            # members take start orders base, base + 1, ... as flows did
        self._seq += known.timed
        added = [Bundle(base + s.ords[0], base + s.ords[-1], base, s.ords, s.paths, s.mask, s.size_bytes,
                        s.size_bytes, call, s.key, s.cap, since_s=now) for s in known.bundles]
        added_mask = known.mask
        # The new flows join every component they touch.
        touched = [g for g in self._groups if g.mask & added_mask] if self._groups else []
        if not touched and len(added) == 1 and self._alone(added[0], added_mask, now):
            return call.done
        members = _in_start_order([g.flows for g in touched]) + added   # new flows start last
        for g in touched:
            added_mask |= g.mask
            self._groups.discard(g)
        group = self._new_group(members, added_mask)
        self._rerate(group)
        self._schedule()
        return call.done

    def _alone(self, b: Bundle, mask: int, now: float) -> bool:
        """A fresh bundle that touches no active flow, rated from the memo: what `_rerate` and
        `_set_rate` do for it (its left bytes at `now` are its size), then `_schedule`. False when
        its rates are not memoised as one rate yet: the caller goes the general way."""
        plan = self._rates_memo.get(b.key)
        rate = plan[b.key] if plan is not None else None
        if rate.__class__ is not float:
            return False
        b.group = self._new_group([b], mask)
        b.left_bytes = b.left_at(now)
        b.rate = rate
        b.version = 1
        if rate > 0:
            b.finish_s = now + max(b.left_bytes, 0.0) / rate
            heapq.heappush(self._heap, (b.finish_s, b.seq, b.version, b))
        self._schedule()
        return True

    def _new_group(self, members: list[Bundle], mask: int) -> _Group:
        group = _Group(members, mask)
        for b in members:
            b.group = group
        self._groups.add(group)
        return group

    def _prepared_for(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> Prepared:
        known = self._prepared.get(id(flows))
        if known is None or known.flows is not flows:
            known = self._prepared[id(flows)] = self._prepare(flows)
        return known

    def _prepare(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> Prepared:
        """Bytes to count per flow, and the bundles of the flows that go through the network."""
        masks = self._masks
        order, timed = [], []
        for links, size, cap in flows:
            if size <= 0 or (not links and cap == INF):
                order.append((size, True))
                continue
            order.append((size, False))
            if type(links) is not tuple:
                links = tuple(links)
            known = masks.get(id(links))
            if known is None or known[0] is not links:
                mask = 0
                for link in links:
                    mask |= 1 << link
                # Holding the tuple keeps its id unique for the run.
                known = masks[id(links)] = (links, mask)
            timed.append((links, known[1], size, cap))
        bundles = bundle_specs(timed, self._next_key)
        mask = 0
        for spec in bundles:
            mask |= spec.mask
        return Prepared(flows, sum(size for size, _ in order), sum(size for size, at_once in order if at_once),
                        len(timed), bundles, mask)

    def _next_key(self) -> int:
        self._keys += 1
        return self._keys

    def _sub_key(self, key: int, positions: tuple[int, ...]) -> int:
        sub = self._sub_keys.get((key, positions))
        if sub is None:
            sub = self._sub_keys[(key, positions)] = self._next_key()
        return sub

    def _rates_for(self, bundles: list[Bundle]) -> dict:
        """Per bundle key, its rate or its split (flow_bundles.split_rates), memoised by component.

        Rates depend only on the multiset of the flows' paths and caps, to the bit, not on their
        order, and flows on the same path with the same cap get the same rate
        (fairshare.max_min_rates): the same bundles again (the next bucket, the next micro-batch)
        reuse them.
        """
        keys = [b.key for b in bundles]            # the multiset of keys: one, or all of them sorted
        key = keys[0] if len(keys) == 1 else tuple(sorted(keys))
        plan = self._rates_memo.get(key)
        if plan is None:
            members = member_flows(bundles)
            caps = [m[2] for m in members]
            rates = max_min_rates([m[1] for m in members], self.capacity_bytes_per_s,
                                  caps if any(c != INF for c in caps) else None, self._shapes)
            plan = self._rates_memo[key] = split_rates(bundles, rates, members, self._sub_key)
        return plan

    def _rerate(self, group: _Group) -> None:
        """Max-min rates for a component's bundles (in start order) from now on; splits where they part."""
        bundles = group.flows
        if not bundles:
            return
        plan = self._rates_for(bundles)
        now = self.env._now
        kept = []
        for b in bundles:
            rate = plan[b.key]
            if rate.__class__ is float:
                self._set_rate(b, rate, now)
                kept.append(b)
                continue
            b.group = None                      # replaced by its parts: its heap entry goes stale
            for part_rate, spec in rate:
                part = sub_bundle(b, spec)
                part.group = group
                if part.rate == part_rate and part.version:
                    part.version += 1   # its own heap entries, never equal to its parent's
                    if part_rate > 0:   # unchanged: the same projected finish as before
                        heapq.heappush(self._heap, (part.finish_s, part.seq, part.version, part))
                else:
                    self._set_rate(part, part_rate, now)
                kept.append(part)
        if len(kept) != len(bundles):
            kept.sort(key=_start_order)
        group.flows = kept

    def _set_rate(self, b: Bundle, rate: float, now: float) -> None:
        if b.rate == rate and b.version:
            return       # unchanged: its heap entry still holds
        b.left_bytes = b.left_at(now)
        b.since_s = now
        b.rate = rate
        b.version += 1
        if rate > 0:
            b.finish_s = now + max(b.left_bytes, 0.0) / rate
            heapq.heappush(self._heap, (b.finish_s, b.seq, b.version, b))

    def _schedule(self) -> None:
        if not self._drop_stale():
            self._generation += 1
            self._timer_at = None
            if self._groups:
                raise RuntimeError("flows are stalled on zero-capacity links")
            return
        now = self.env._now
        delay_s = max(self._heap[0][0] - now, 0.0)
        if now + delay_s == self._timer_at:
            return      # the live timer fires then (simpy times it now + delay): no second one
        self._generation += 1
        self._timer_at = now + delay_s
        generation = self._generation
        timer = timeout(self.env, delay_s)
        timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _drop_stale(self) -> bool:
        """Pop entries of finished bundles and of superseded rates; True while a live one remains."""
        heap = self._heap
        while heap and (heap[0][3].group is None or heap[0][2] != heap[0][3].version):
            heapq.heappop(heap)
        return bool(heap)

    def _done(self, b: Bundle, now: float) -> bool:
        left = b.left_bytes - b.rate * (now - b.since_s)       # b.left_at(now)
        # Done when (almost) nothing is left, or when what is left would take less
        # than the clock can represent at this time (else time would never advance).
        return (left <= max(_DONE_FRACTION * b.size_bytes, _DONE_BYTES)
                or (b.rate > 0 and now + left / b.rate == now))

    def _finished(self, now: float) -> list[Bundle]:
        """Pop the bundles that are done now, in order of projected finish and start."""
        heap = self._heap
        finished: list[Bundle] = []
        while self._drop_stale():
            b = heap[0][3]
            if not self._done(b, now):
                if heap[0][0] <= now:
                    # Rounding left a sliver past the projected finish: project again from
                    # what is actually left, so the next timer lies in the future.
                    heapq.heappop(heap)
                    b.left_bytes, b.since_s = b.left_at(now), now
                    b.version += 1
                    b.finish_s = now + b.left_bytes / b.rate
                    heapq.heappush(heap, (b.finish_s, b.seq, b.version, b))
                break
            heapq.heappop(heap)
            finished.append(b)
        return finished

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._timer_at = None
        finished = self._finished(self.env._now)
        if len(finished) == 1:          # the common case: what the loops below do for one bundle
            b = finished[0]
            self.bytes_delivered += b.size_bytes * b.count
            call = b.call
            call.pending -= b.count
            if call.pending == 0:
                succeed(call.done)
            group, b.group = b.group, None
            self._groups.discard(group)
            rest = [m for m in group.flows if m.group is not None]
            if rest:
                for group in self._split(rest):
                    self._rerate(group)
            self._schedule()
            return
        affected: dict[int, _Group] = {}
        completed: dict[int, tuple] = {}      # id(call) -> (finish, last start order, call)
        for b in finished:
            self.bytes_delivered += b.size_bytes * b.count
            call = b.call
            call.pending -= b.count
            last = (b.finish_s, b.last_seq, call)
            known = completed.get(id(call))
            if known is None or _finish_then_start(last) > _finish_then_start(known):
                completed[id(call)] = last
            affected[id(b.group)] = b.group
            b.group = None
        # A call ends with its last flow: in order of the flows' projected finish and start.
        for _finish, _seq, call in sorted(completed.values(), key=_finish_then_start):
            if call.pending == 0:
                succeed(call.done)
        for group in affected.values():
            self._groups.discard(group)
        rest = _in_start_order([[b for b in group.flows if b.group is not None] for group in affected.values()])
        # Each component on its own: the rates of one never depend on another's flows
        # (fairshare.max_min_rates), and a component that recurs reuses its memoised rates.
        for group in self._split(rest):
            self._rerate(group)
        self._schedule()

    def _split(self, bundles: list[Bundle]) -> list[_Group]:
        """Regroup what is left of components that lost flows: they may have come apart."""
        groups = []
        pending = bundles
        while pending:
            seed = pending[0]
            members, mask, outside = [seed], seed.mask, []
            rest = pending[1:]
            grew = True
            while grew:
                grew = False
                outside = []
                for b in rest:
                    if b.mask & mask:
                        mask |= b.mask
                        members.append(b)
                        grew = True
                    else:
                        outside.append(b)
                rest = outside
            members.sort(key=_start_order)
            group = _Group(members, mask)
            for b in members:
                b.group = group
            self._groups.add(group)
            groups.append(group)
            pending = rest
        return groups


def _finish_then_start(item: tuple) -> tuple:
    return item[0], item[1]
