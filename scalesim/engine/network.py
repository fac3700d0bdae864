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
and completions come off a heap of projected finish times.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
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
    seq: int                   # start order: components list their flows in it
    links: tuple[int, ...]
    mask: int                  # bit i set: the flow crosses link i
    size_bytes: float
    left_bytes: float          # what remained at since_s
    call: _Call
    key: tuple                 # (id(links), cap): the flow's part of a rate-memo key
    cap: float = INF
    rate: float = 0.0
    since_s: float = 0.0
    version: int = 0           # heap entries of older versions are stale
    group: _Group | None = None

    def left_at(self, now_s: float) -> float:
        return self.left_bytes - self.rate * (now_s - self.since_s)


def _in_start_order(lists: list[list]) -> list:
    """Merge flow lists that are each in start order (every group's is) into one."""
    if not lists:
        return []
    if len(lists) == 1:
        return list(lists[0])
    return list(heapq.merge(*lists, key=_start_order))


def _start_order(flow) -> int:
    return flow.seq


@dataclass(slots=True, eq=False)
class _Group:
    """A connected component of the active flows: they share links, directly or through each other."""
    flows: list[_ActiveFlow]
    mask: int


@dataclass
class FluidNetwork:
    env: simpy.Environment
    capacity_bytes_per_s: Sequence[float]
    bytes_sent: float = 0.0
    bytes_delivered: float = 0.0
    _groups: set = field(default_factory=set)
    _heap: list = field(default_factory=list)                    # (finish_s, seq, version, flow)
    _masks: dict[int, tuple] = field(default_factory=dict)      # id(links) -> (links, mask, {cap: key})
    _prepared: dict[int, tuple] = field(default_factory=dict)   # id(flows) -> (flows, _prepare(flows))
    _seq: int = 0
    _generation: int = 0
    _rates_memo: dict = field(default_factory=dict)

    def start(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> simpy.Event:
        """Start flows (links, size_bytes, rate cap) together; the event fires when all have arrived.

        A caller that starts the same flows again (the next bucket of a collective) may pass the
        same sequence object: what is derived from it (masks, rate-memo keys) is kept per object.
        """
        call = _Call(self.env.event(), 0)
        now = self.env.now
        known = self._prepared.get(id(flows))
        if known is None or known[0] is not flows:
            # Holding the sequence keeps its id unique for the run.
            known = self._prepared[id(flows)] = (flows, self._prepare(flows))
        added = []
        added_mask = 0
        for links, mask, size, cap, key in known[1]:
            self.bytes_sent += size
            if mask < 0:
                self.bytes_delivered += size
                continue
            self._seq += 1
            added.append(_ActiveFlow(self._seq, links, mask, size, size, call, key, cap, since_s=now))
            added_mask |= mask
        call.pending = len(added)
        if not added:
            call.done.succeed()
            return call.done
        # The new flows join every component they touch.
        touched = [g for g in self._groups if g.mask & added_mask]
        members = _in_start_order([g.flows for g in touched]) + added   # new flows start last
        group = _Group(members, added_mask)
        for g in touched:
            group.mask |= g.mask
            self._groups.discard(g)
        for f in members:
            f.group = group
        self._groups.add(group)
        self._rerate(members)
        self._schedule()
        return call.done

    def _prepare(self, flows: Sequence[tuple[tuple[int, ...], float, float]]) -> list[tuple]:
        """Per flow: (links, mask, size, cap, rate-memo key); mask -1 for flows that arrive at once."""
        masks = self._masks
        out = []
        for links, size, cap in flows:
            if size <= 0 or (not links and cap == INF):
                out.append((links, -1, size, cap, None))
                continue
            if type(links) is not tuple:
                links = tuple(links)
            known = masks.get(id(links))
            if known is None or known[0] is not links:
                mask = 0
                for link in links:
                    mask |= 1 << link
                # Holding the tuple keeps its id unique for the run: rate memo keys use it.
                known = masks[id(links)] = (links, mask, {})
            key = known[2].get(cap)
            if key is None:
                key = known[2][cap] = (id(links), cap)
            out.append((links, known[1], size, cap, key))
        return out

    def _rerate(self, flows: list[_ActiveFlow]) -> None:
        """Max-min rates for these flows (whole components, in start order) from now on."""
        if not flows:
            return
        # Rates depend only on the multiset of the flows' paths and caps, to the bit, not on
        # their order, and flows on the same path with the same cap get the same rate
        # (fairshare.max_min_rates): the same paths again, in whatever order the calls
        # started (the next bucket, the next micro-batch), reuse them.
        keys = [f.key for f in flows]
        key = frozenset(Counter(keys).items())
        by_path = self._rates_memo.get(key)
        if by_path is None:
            caps = [f.cap for f in flows]
            rates = max_min_rates([f.links for f in flows], self.capacity_bytes_per_s,
                                  caps if any(c != INF for c in caps) else None)
            by_path = self._rates_memo[key] = dict(zip(keys, rates))
        else:
            rates = [by_path[k] for k in keys]
        now = self.env.now
        heap = self._heap
        for f, rate in zip(flows, rates):
            if f.rate == rate and f.version:
                continue       # unchanged: its heap entry still holds
            f.left_bytes = f.left_at(now)
            f.since_s = now
            f.rate = rate
            f.version += 1
            if rate > 0:
                heapq.heappush(heap, (now + max(f.left_bytes, 0.0) / rate, f.seq, f.version, f))

    def _schedule(self) -> None:
        self._generation += 1
        if not self._drop_stale():
            if self._groups:
                raise RuntimeError("flows are stalled on zero-capacity links")
            return
        generation = self._generation
        timer = self.env.timeout(max(self._heap[0][0] - self.env.now, 0.0))
        timer.callbacks.append(lambda _event: self._on_timer(generation))

    def _drop_stale(self) -> bool:
        """Pop entries of finished flows and of superseded rates; True while a live one remains."""
        heap = self._heap
        while heap and (heap[0][3].group is None or heap[0][2] != heap[0][3].version):
            heapq.heappop(heap)
        return bool(heap)

    def _done(self, f: _ActiveFlow, now: float) -> bool:
        left = f.left_at(now)
        # Done when (almost) nothing is left, or when what is left would take less
        # than the clock can represent at this time (else time would never advance).
        return (left <= max(_DONE_FRACTION * f.size_bytes, _DONE_BYTES)
                or (f.rate > 0 and now + left / f.rate == now))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return
        now = self.env.now
        heap = self._heap
        finished: list[_ActiveFlow] = []
        while self._drop_stale():
            f = heap[0][3]
            if not self._done(f, now):
                if heap[0][0] <= now:
                    # Rounding left a sliver past the projected finish: project again from
                    # what is actually left, so the next timer lies in the future.
                    heapq.heappop(heap)
                    f.left_bytes, f.since_s = f.left_at(now), now
                    f.version += 1
                    heapq.heappush(heap, (now + f.left_bytes / f.rate, f.seq, f.version, f))
                break
            heapq.heappop(heap)
            finished.append(f)
        affected: dict[int, _Group] = {}
        for f in finished:
            self.bytes_delivered += f.size_bytes
            f.call.pending -= 1
            if f.call.pending == 0:
                f.call.done.succeed()
            affected[id(f.group)] = f.group
            f.group = None
        for group in affected.values():
            self._groups.discard(group)
        rest = _in_start_order([[f for f in group.flows if f.group is not None] for group in affected.values()])
        # Each component on its own: the rates of one never depend on another's flows
        # (fairshare.max_min_rates), and a component that recurs reuses its memoised rates.
        for group in self._split(rest):
            self._rerate(group.flows)
        self._schedule()

    def _split(self, flows: list[_ActiveFlow]) -> list[_Group]:
        """Regroup what is left of components that lost flows: they may have come apart."""
        groups = []
        pending = flows
        while pending:
            seed = pending[0]
            members, mask, outside = [seed], seed.mask, []
            rest = pending[1:]
            grew = True
            while grew:
                grew = False
                outside = []
                for f in rest:
                    if f.mask & mask:
                        mask |= f.mask
                        members.append(f)
                        grew = True
                    else:
                        outside.append(f)
                rest = outside
            members.sort(key=lambda f: f.seq)
            group = _Group(members, mask)
            for f in members:
                f.group = group
            self._groups.add(group)
            groups.append(group)
            pending = rest
        return groups
