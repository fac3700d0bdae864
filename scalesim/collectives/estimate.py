"""Time of a plan running alone on the network: the fluid model without an event queue.

Used to choose algorithms (as NCCL's tuner predicts times to choose) and as
the closed form the engine must agree with on an idle network.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain

from scalesim.collectives.plan import CollectivePlan, Flow
from scalesim.fairshare import max_min_rates

# `plan_time_bounds_s`'s upper bound is widened by this fraction: the fluid model's floating-point
# steps (a few per flow, each rounding by 1e-16) can end a hair after the exact finish it bounds.
ROUNDING_SLACK = 1e-6


def flow_components(flows: tuple[Flow, ...]) -> list[list[Flow]]:
    """Flows grouped by shared links (transitively), in the order of their first flow."""
    return [[flows[i] for i in group] for group in _components([flow.links for flow in flows])]


def _components(flow_links: Sequence[tuple[int, ...]]) -> list[list[int]]:
    """`flow_components` as indices into `flow_links`."""
    links = [link for own in flow_links for link in own]
    if len(set(links)) == len(links):           # no link used twice (most plans): each flow alone
        return [[i] for i in range(len(flow_links))]
    parent = list(range(len(flow_links)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_user: dict[int, int] = {}
    for i, own in enumerate(flow_links):
        for link in own:
            j = first_user.setdefault(link, i)
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(flow_links)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def flows_time_s(flows: Sequence[Flow], capacity: Sequence[float], memo: dict | None = None) -> float:
    """Time until the last of `flows` ends, started together, sharing links max-min fairly.

    Groups of flows that share no link cannot slow each other: each is timed alone.
    `memo`: see `plan_time_s`.
    """
    if memo is None:
        groups = flow_components(tuple(flows))
    else:
        links = tuple(f.links for f in flows)
        key = ("components", links)
        found = memo.get(key)
        if found is None:
            found = memo[key] = _components(links)
        groups = [[flows[i] for i in group] for group in found]
    if len(groups) > 1:
        return max(_group_time_s(g, capacity, memo) for g in groups)
    return _group_time_s(flows, capacity, memo)


def _group_time_s(flows: Sequence[Flow], capacity: Sequence[float], memo: dict | None = None) -> float:
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
        capped = any(c != float("inf") for c in caps)
        if memo is None:
            rates = max_min_rates([f.links for f in active], capacity, caps if capped else None)
        else:   # the rates depend on the flows' links and caps alone, not on their bytes
            key = ("rates", tuple(f.links for f in active), tuple(caps) if capped else None)
            rates = memo.get(key)
            if rates is None:
                rates = memo[key] = max_min_rates(list(key[1]), capacity, caps if capped else None, memo)
        step = min(r / rate for r, rate in zip(remaining, rates))
        elapsed += step
        keep = [(f, r - rate * step) for f, r, rate in zip(active, remaining, rates)
                if r - rate * step > 1e-9 * f.size_bytes]
        active = [f for f, _ in keep]
        remaining = [r for _, r in keep]
    return elapsed


def plan_time_s(plan: CollectivePlan, capacity: Sequence[float], memo: dict | None = None) -> float:
    """The plan's phases timed one after the other. `memo`: a dict the caller keeps for one topology,
    whose link capacities `capacity` must be (the rates and link-sharing groups of a set of flows depend
    on their links alone, and recur across sizes and protocols of a call: kept there, the same floats)."""
    if memo is not None:
        held = memo.get(("fair-share",))
        if held is None or held[0] is not capacity:
            held = memo[("fair-share",)] = (capacity, {})
        memo = held[1]
    return sum(p.latency_s + flows_time_s(p.flows, capacity, memo) for p in plan.phases)


def plan_time_bounds_s(plan: CollectivePlan, capacity: Sequence[float], low_only: bool = False
                       ) -> tuple[float, float]:
    """Bounds (low, high) on `plan_time_s(plan, capacity)` as computed, floats included, without the
    fluid model: for choosing among candidates whose latencies alone tell them apart (select.py).

    low: the phases' latencies summed as `plan_time_s` sums them, with no time for the flows (their
    time is >= 0 and float addition is monotone, so low <= the computed time to the bit). high: each
    phase's latency plus the time its slowest flow would take at the rate max-min fairness
    guarantees it, min(its cap, min over its links of capacity / flows crossing the link): a
    flow is frozen at the share of a link that fills, and no flow on that link got more than that
    share, so the share is at least capacity / crossings (the crossings only fall as flows end).
    Widened by ROUNDING_SLACK; infinite when a guaranteed rate is zero. `low_only`: high is not
    worked out (infinite)."""
    low = sum(p.latency_s + 0.0 for p in plan.phases)
    if low_only:
        return low, float("inf")
    high = 0
    for phase in plan.phases:
        active = [f for f in phase.flows if f.size_bytes > 0]
        crossings = Counter(chain.from_iterable(f.links for f in active))
        slowest_s = 0.0
        for f in active:
            rate = min([f.rate_cap_bytes_per_s] + [capacity[link] / crossings[link] for link in f.links])
            if rate <= 0:
                return low, float("inf")
            slowest_s = max(slowest_s, f.size_bytes / rate)
        high += phase.latency_s + slowest_s * (1 + ROUNDING_SLACK)
    return low, high
