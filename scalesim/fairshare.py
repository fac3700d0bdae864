"""Max-min fair sharing of link bandwidth among concurrent flows.

Why max-min: it is the steady state that TCP-like and credit-based transports
(PCIe, NVLink, InfiniBand) approach when several long transfers share links,
and the standard fluid model of flow-level network simulators (e.g. SimGrid's
default, ASTRA-sim's analytical network backend). Each flow gets the largest rate
such that no link is over capacity and no flow can gain without taking from a
flow that has less.

Two implementations of the same progressive filling give the same rates to the
bit: a heap of link shares (small components) and numpy arrays (large ones,
such as an expert all-to-all's thousands of flows).

>>> max_min_rates([(0,), (0,)], [10.0])          # two flows on one link halve it
[5.0, 5.0]
>>> max_min_rates([(0, 1), (1,)], [2.0, 10.0])    # the first is held by link 0
[2.0, 8.0]
>>> max_min_rates([(0,), (0,)], [10.0], caps=[1.0, float("inf")])
[1.0, 9.0]
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import chain

import numpy as np

INF = float("inf")
# From this many (flow, link) crossings on, the array version is faster (an expert all-to-all of
# 64 ranks over NDR is 4,032 flows of 6-8 links); both give the same rates to the bit.
ARRAYS_FROM = 2048


def max_min_rates(flow_links: Sequence[Sequence[int]], capacity: Sequence[float],
                  caps: Sequence[float] | None = None, memo: dict | None = None) -> list[float]:
    """Rates (bytes/s) by progressive filling. A flow with no links and no cap gets an infinite rate.

    `caps` optionally limits single flows (e.g. what one NCCL channel or an
    in-switch reduction can drive); a cap acts as a private link of that
    capacity. Ties between equally tight links are broken by link id, so the
    result is deterministic.

    `memo`: the caller's dict (for one command; never the process's) keeping the rates of large
    sets of flows by their `shape`: another set of the same shape (the same collective on the next
    pipeline stage's GPUs) gets them without filling again.
    """
    flow_links, private = _with_private_links(flow_links, caps)
    if sum(map(len, flow_links)) >= ARRAYS_FROM:
        key = None if memo is None else shape(flow_links, capacity, private)
        if key is not None and (known := memo.get(key)) is not None:
            return known
        rates = filling_arrays(flow_links, capacity, private)
        if rates is None:
            rates = filling_heap(flow_links, capacity, private)
        if key is not None:
            memo[key] = rates
        return rates
    return filling_heap(flow_links, capacity, private)


def shape(flow_links: Sequence[Sequence[int]], capacity: Sequence[float], private: dict[int, float]) -> tuple:
    """What the filling of these flows depends on, to the bit: each flow's links as indices among
    the links crossed in ascending id order, and those links' capacities in that order. Both
    fillings see link ids only through that order (the arrays work on the indices; the heap breaks
    ties by id), so flows of the same shape on other links get the same rates."""
    lengths = np.fromiter(map(len, flow_links), np.int64, len(flow_links))
    ids = np.fromiter(chain.from_iterable(flow_links), np.int64, int(lengths.sum()))
    used, index = np.unique(ids, return_inverse=True)
    ordered = used.tolist()
    capacities = np.fromiter((private[link] if link < 0 else capacity[link] for link in ordered), np.float64,
                             len(ordered))
    return ("max-min shape", lengths.tobytes(), index.reshape(-1).tobytes(), capacities.tobytes())


def _with_private_links(flow_links, caps) -> tuple[Sequence[Sequence[int]], dict[int, float]]:
    """Each capped flow gets a private link (ids -1, -2, ... in flow order) of its cap's capacity."""
    private: dict[int, float] = {}
    if caps is None:
        return flow_links, private
    flow_links = [tuple(links) for links in flow_links]
    link = -1
    for i, cap in enumerate(caps):
        if cap != INF:
            flow_links[i] = flow_links[i] + (link,)
            private[link] = float(cap)
            link -= 1
    return flow_links, private


def filling_heap(flow_links: Sequence[Sequence[int]], capacity: Sequence[float],
                 private: dict[int, float]) -> list[float]:
    """Progressive filling with a heap of link shares (links with negative ids: `private`)."""
    n = len(flow_links)
    rates = [INF] * n
    users: dict[int, list[int]] = {}
    remaining: dict[int, float] = dict(private)
    for i, links in enumerate(flow_links):
        for link in links:
            users.setdefault(link, []).append(i)
    for link in users:
        if link >= 0:
            remaining[link] = float(capacity[link])
    unfrozen = {link: len(flows) for link, flows in users.items()}
    frozen = [False] * n
    # Progressive filling with a lazy heap: a link's fair share never falls as
    # flows freeze elsewhere at lower rates, so stale heap entries can simply
    # be skipped when their share no longer matches.
    heap = [(remaining[link] / count, link) for link, count in unfrozen.items()]
    heapq.heapify(heap)
    while heap:
        share, tight = heapq.heappop(heap)
        count = unfrozen.get(tight)
        if not count or share != remaining[tight] / count:
            continue
        share = max(share, 0.0)
        touched = set()
        for i in users[tight]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            for link in flow_links[i]:
                remaining[link] -= share
                unfrozen[link] -= 1
                touched.add(link)
        for link in touched:
            if unfrozen[link] > 0:
                heapq.heappush(heap, (remaining[link] / unfrozen[link], link))
    return rates


def filling_arrays(flow_links: Sequence[Sequence[int]], capacity: Sequence[float],
                   private: dict[int, float]) -> list[float] | None:
    """`filling_heap`'s rates, bit for bit, with numpy (None where a used capacity is not finite).

    Each step freezes the unfrozen flows of the link with the smallest (share, id), as the
    heap's valid pops do, and takes that share from every link those flows cross one
    subtraction at a time (`np.subtract.at` is unbuffered), so every remaining capacity goes
    through the same floating-point operations in the same order.
    """
    n = len(flow_links)
    lengths = np.fromiter(map(len, flow_links), np.int64, n)
    ids = np.fromiter(chain.from_iterable(flow_links), np.int64, int(lengths.sum()))
    # link ids in ascending order, and each crossing's index among them (from the ids crossed, not
    # a mask over every link of the cluster: 155,664 on 16,384 GPUs)
    used, pair_link = np.unique(ids, return_inverse=True)
    pair_link = pair_link.reshape(-1)
    m = len(used)
    remaining = np.empty(m + 1)                             # slot m: padding, never chosen
    real = used >= 0
    # only the used links' capacities (a 16,384-GPU cluster has 155,664 links: converting them all
    # cost more than the filling)
    remaining[:m][real] = np.fromiter(map(capacity.__getitem__, used[real].tolist()), np.float64)
    remaining[:m][~real] = [private[int(link)] for link in used[~real]]
    if not np.isfinite(remaining[:m]).all():
        return None
    count = np.bincount(pair_link, minlength=m + 1)
    width = int(lengths.max()) if n else 0
    padded = np.full((n, width), m, dtype=np.int64)         # each flow's links, padded with slot m
    padded[np.arange(width) < lengths[:, None]] = pair_link
    ordered = np.sort(padded, axis=1)
    repeats = bool(((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] != m)).any())   # a link crossed twice
    by_link = np.argsort(pair_link, kind="stable")
    starts = np.concatenate(([0], np.cumsum(count[:m])))
    link_flows = np.repeat(np.arange(n), lengths)[by_link]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = remaining / count
    share[m] = INF
    frozen = np.zeros(n, dtype=bool)
    rates = np.full(n, INF)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            tight = int(share.argmin())
            level = float(share[tight])
            if level == INF:
                break
            level = max(level, 0.0)
            flows = link_flows[starts[tight]:starts[tight + 1]]
            flows = flows[~frozen[flows]]
            if repeats:
                flows = np.unique(flows)
            frozen[flows] = True
            rates[flows] = level
            links = padded[flows].ravel()
            np.subtract.at(remaining, links, level)
            np.subtract.at(count, links, 1)
            left = count[links]
            share[links] = np.where(left > 0, remaining[links] / left, INF)
            share[m] = INF
    return rates.tolist()
