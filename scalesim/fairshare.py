"""Max-min fair sharing of link bandwidth among concurrent flows.

Why max-min: it is the steady state that TCP-like and credit-based transports
(PCIe, NVLink, InfiniBand) approach when several long transfers share links,
and the standard fluid model of flow-level network simulators (e.g. SimGrid's
default, ASTRA-sim's analytical network backend). Each flow gets the largest rate
such that no link is over capacity and no flow can gain without taking from a
flow that has less.

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


def max_min_rates(flow_links: Sequence[Sequence[int]], capacity: Sequence[float],
                  caps: Sequence[float] | None = None) -> list[float]:
    """Rates (bytes/s) by progressive filling. A flow with no links and no cap gets an infinite rate.

    `caps` optionally limits single flows (e.g. what one NCCL channel or an
    in-switch reduction can drive); a cap acts as a private link of that
    capacity. Ties between equally tight links are broken by link id, so the
    result is deterministic.
    """
    n = len(flow_links)
    rates = [float("inf")] * n
    users: dict[int, list[int]] = {}
    remaining: dict[int, float] = {}
    private = -1
    if caps is not None:
        flow_links = [tuple(links) for links in flow_links]
        for i, cap in enumerate(caps):
            if cap != float("inf"):
                flow_links[i] = flow_links[i] + (private,)
                remaining[private] = float(cap)
                private -= 1
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
