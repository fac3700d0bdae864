"""Time of a plan running alone on the network: the fluid model without an event queue.

Used to choose algorithms (as NCCL's tuner predicts times to choose) and as
the closed form the engine must agree with on an idle network.
"""

from __future__ import annotations

from collections.abc import Sequence

from scalesim.collectives.plan import CollectivePlan, Flow
from scalesim.fairshare import max_min_rates


def flow_components(flows: tuple[Flow, ...]) -> list[list[Flow]]:
    """Flows grouped by shared links (transitively), in the order of their first flow."""
    links = [link for flow in flows for link in flow.links]
    if len(set(links)) == len(links):           # no link used twice (most plans): each flow alone
        return [[flow] for flow in flows]
    parent = list(range(len(flows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_user: dict[int, int] = {}
    for i, flow in enumerate(flows):
        for link in flow.links:
            j = first_user.setdefault(link, i)
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[Flow]] = {}
    for i, flow in enumerate(flows):
        groups.setdefault(root(i), []).append(flow)
    return list(groups.values())


def flows_time_s(flows: Sequence[Flow], capacity: Sequence[float]) -> float:
    """Time until the last of `flows` ends, started together, sharing links max-min fairly.

    Groups of flows that share no link cannot slow each other: each is timed alone.
    """
    groups = flow_components(tuple(flows))
    if len(groups) > 1:
        return max(_group_time_s(g, capacity) for g in groups)
    return _group_time_s(flows, capacity)


def _group_time_s(flows: Sequence[Flow], capacity: Sequence[float]) -> float:
    remaining = [f.size_bytes for f in flows if f.size_bytes > 0]
    active = [f for f in flows if f.size_bytes > 0]
    if len(active) == 1:
        # One flow alone: held by its tightest link (a link it crosses twice gives it half).
        (f,) = active
        links = f.links
        rate = min([f.rate_cap_bytes_per_s] + [capacity[link] / links.count(link) for link in set(links)])
        return f.size_bytes / rate if rate > 0 else float("inf")
    elapsed = 0.0
    while active:
        caps = [f.rate_cap_bytes_per_s for f in active]
        rates = max_min_rates([f.links for f in active], capacity,
                              caps if any(c != float("inf") for c in caps) else None)
        step = min(r / rate for r, rate in zip(remaining, rates))
        elapsed += step
        keep = [(f, r - rate * step) for f, r, rate in zip(active, remaining, rates)
                if r - rate * step > 1e-9 * f.size_bytes]
        active = [f for f, _ in keep]
        remaining = [r for _, r in keep]
    return elapsed


def plan_time_s(plan: CollectivePlan, capacity: Sequence[float]) -> float:
    return sum(p.latency_s + flows_time_s(p.flows, capacity) for p in plan.phases)
