"""Bundles: the flows of one network call that move in lock-step, kept as one object.

Flows started by the same call with the same size and rate cap start together;
while max-min fair sharing gives them the same rate they stay identical (same
bytes left, same finish time), so the network keeps them as one bundle with a
member count instead of one object each. An all-to-all of 64 ranks is 4,032
flows but typically a handful of bundles: what an event costs follows the
bundles, not the flows. When a rate computation gives a bundle's members
different rates, the bundle splits into one bundle per rate (`split_rates`),
each member keeping its own path, so the rates are exactly the per-flow ones.

A bundle's key names its member set (and so the multiset of their paths and
caps): a fresh bundle's key is given when its call's flows are prepared, a
split's key is interned from its parent's key and the positions it keeps. The
network memoises rates by the multiset of bundle keys of a component.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import simpy

INF = float("inf")


@dataclass(slots=True, eq=False)
class Call:
    """The flows one `start` launched: its event fires when the last of them arrives."""
    done: simpy.Event
    pending: int


@dataclass(slots=True, frozen=True)
class BundleSpec:
    """Flows of one call with the same size and cap: positions among the call's timed flows, paths."""
    ords: tuple[int, ...]              # ordinals among the call's flows that go through the network
    paths: tuple[tuple[int, ...], ...]
    mask: int                          # union of the members' link masks
    size_bytes: float
    cap: float
    key: int


@dataclass(slots=True, frozen=True)
class Prepared:
    """What the network derives once from a call's flow list (the list is held: its id stays unique)."""
    flows: Sequence
    sent_bytes: float                                 # all the flows' sizes
    instant_bytes: float                              # of flows that arrive at once (empty, or no link)
    timed: int                                        # flows that go through the network
    bundles: tuple[BundleSpec, ...]
    mask: int                                         # union of the bundles' link masks


@dataclass(slots=True, eq=False)
class Bundle:
    """Active flows in lock-step: same call, size, cap, rate and so the same bytes left."""
    seq: int                   # start order of the first member: components list bundles in it
    last_seq: int              # start order of the last member
    base: int                  # a member's start order is base + its ordinal
    ords: tuple[int, ...]
    paths: tuple[tuple[int, ...], ...]
    mask: int
    size_bytes: float
    left_bytes: float          # what each member had left at since_s
    call: Call
    key: int
    cap: float = INF
    rate: float = 0.0
    since_s: float = 0.0
    finish_s: float = INF      # projected when last pushed on the completion heap
    version: int = 0           # heap entries of older versions are stale
    group: object = None

    @property
    def count(self) -> int:
        return len(self.ords)

    def left_at(self, now_s: float) -> float:
        return self.left_bytes - self.rate * (now_s - self.since_s)


def bundle_specs(timed: list[tuple[tuple[int, ...], int, float, float]], next_key) -> tuple[BundleSpec, ...]:
    """Group a call's timed flows (links, mask, size, cap) by (size, cap), in order of first member."""
    groups: dict[tuple[float, float], list[int]] = {}
    for ordinal, (_links, _mask, size, cap) in enumerate(timed):
        groups.setdefault((size, cap), []).append(ordinal)
    specs = []
    for (size, cap), ords in groups.items():
        mask = 0
        for o in ords:
            mask |= timed[o][1]
        specs.append(BundleSpec(tuple(ords), tuple(timed[o][0] for o in ords), mask, size, cap, next_key()))
    return tuple(specs)


def member_flows(bundles: Sequence[Bundle]) -> list[tuple[int, tuple[int, ...], float, Bundle, int]]:
    """Every member of these bundles as (start order, links, cap, bundle, position), in start order."""
    members = [(b.base + o, path, b.cap, b, pos)
               for b in bundles for pos, (o, path) in enumerate(zip(b.ords, b.paths))]
    members.sort(key=_first)
    return members


def _first(item) -> int:
    return item[0]


def split_rates(bundles: Sequence[Bundle], rates: Sequence[float], members: list, sub_key) -> dict:
    """Per bundle key: its members' common rate, or [(rate, part spec)] when they differ."""
    by_bundle: dict[int, list[float]] = {}
    for (_seq, _links, _cap, b, pos), rate in zip(members, rates):
        by_bundle.setdefault(id(b), [0.0] * b.count)[pos] = rate
    plan: dict = {}
    for b in bundles:
        mine = by_bundle[id(b)]
        first = mine[0]
        if all(r == first for r in mine):
            plan[b.key] = first
            continue
        positions: dict[float, list[int]] = {}
        for pos, r in enumerate(mine):
            positions.setdefault(r, []).append(pos)
        plan[b.key] = [(r, _part(b, tuple(p), sub_key)) for r, p in positions.items()]
    return plan


def _part(b: Bundle, positions: tuple[int, ...], sub_key) -> BundleSpec:
    """The spec of the members of `b` at these positions (its key interned from b's and the positions)."""
    paths = tuple(b.paths[p] for p in positions)
    mask = 0
    for path in paths:
        for link in path:
            mask |= 1 << link
    return BundleSpec(tuple(b.ords[p] for p in positions), paths, mask, b.size_bytes, b.cap,
                      sub_key(b.key, positions))


def sub_bundle(b: Bundle, part: BundleSpec) -> Bundle:
    """The members of `b` that `part` names, in the state `b` is in."""
    ords = part.ords
    return Bundle(b.base + ords[0], b.base + ords[-1], b.base, ords, part.paths, part.mask, b.size_bytes,
                  b.left_bytes, b.call, part.key, b.cap, b.rate, b.since_s, b.finish_s, b.version, b.group)
