"""Where the fluid network can be skipped: calls and flows that never share a link with other traffic.

A call whose links no other call family uses runs alone on them, so the fluid
model's answer is the closed form; groups of a phase's flows on private links
likewise; and a stream of blocking solo calls can be walked inside the compute
stream's walk. Each gives the same timeline as playing everything out, with
far fewer events. Pure functions of the program; `simulator.simulate` uses them.
"""

from __future__ import annotations

from scalesim.collectives.estimate import flow_components, flows_time_s, plan_time_s
from scalesim.collectives.plan import CollectivePlan, Flow
from scalesim.program import COMPUTE_STREAM, CollectiveTask, Program


def call_families(program: Program) -> tuple[dict[int, CollectivePlan], dict[int, set]]:
    """Distinct plans by id, and for each link the call families that use it.

    Calls of one family (the same ranks on the same stream) run one after
    another on every rank, so they never overlap each other.
    """
    owners: dict[int, set] = {}
    plans: dict[int, CollectivePlan] = {}
    seen: set[tuple] = set()
    for tasks in program.tasks.values():
        for task in tasks:
            if not isinstance(task, CollectiveTask):
                continue
            family = (task.plan.ranks, task.stream)
            if (id(task.plan), family) in seen:
                continue
            # One plan object may serve calls of several families (plans are memoised):
            # each family counts as a user of its links.
            seen.add((id(task.plan), family))
            plans[id(task.plan)] = task.plan
            for phase in task.plan.phases:
                for flow in phase.flows:
                    for link in flow.links:
                        owners.setdefault(link, set()).add(family)
    return plans, owners


def isolated_plans(program: Program, families: tuple | None = None) -> dict[int, float]:
    """Plans that can never share a link with another call, and their closed-form times.

    If no other family uses any of a family's links, each of its calls runs
    alone on them, and the fluid model's answer is the closed form
    `plan_time_s` -- no need to play it out against the rest of the network.
    (Typically: tensor-parallel all-reduces on a node's NVSwitch ports.)
    `families`: `call_families(program)` when the caller already has it.
    """
    plans, owners = families or call_families(program)
    out = {}
    for key, plan in plans.items():
        links = {link for phase in plan.phases for flow in phase.flows for link in flow.links}
        if all(len(owners[link]) == 1 for link in links):
            out[key] = plan_time_s(plan, program.link_capacity_bytes_per_s)
    return out


def private_splits(program: Program, isolated: dict[int, float], families: tuple | None = None
                   ) -> dict[int, list]:
    """Per phase of each shared plan: its exposed flows, and the closed-form time of the rest.

    A group of a phase's flows that shares links only among itself, on links
    no other call family uses, runs at rates nothing else can change: the
    fluid model's answer for it is `flows_time_s` of the group alone. Only the
    groups that touch shared links go through the network. This is what keeps
    a data-parallel ring over hundreds of nodes cheap: of its edges, only the
    few that cross links other traffic uses (the simulated ranks' NICs, a
    shared spine) are played out; the result is the same.
    """
    plans, owners = families or call_families(program)
    capacity = program.link_capacity_bytes_per_s
    out: dict[int, list] = {}
    for key, plan in plans.items():
        if key in isolated:
            continue
        phases = []
        reduced = False
        for phase in plan.phases:
            exposed: list[Flow] = []
            private_s = private_bytes = 0.0
            for group in flow_components(phase.flows):
                if any(len(owners[link]) > 1 for f in group for link in f.links):
                    exposed.extend(group)
                else:
                    reduced = True
                    private_s = max(private_s, flows_time_s(group, capacity))
                    private_bytes += sum(f.size_bytes for f in group)
            phases.append((tuple(exposed), private_s, private_bytes))
        if reduced:
            out[key] = phases
    return out


def inline_blocking_calls(tasks: tuple, streams: dict[str, list[int]], isolated: dict[int, float]
                           ) -> dict[str, list[int]]:
    """Task orders to walk, one per stream, with blocking solo calls moved into the compute walk.

    A stream whose every task is a call with no other simulated member, timed
    by formula, waiting for one compute task and awaited by the compute task
    after it (Megatron's blocking tensor-parallel all-reduces under symmetry),
    adds nothing but its own time between two compute tasks: walking it inside
    the compute stream's walk gives the same timeline with a fraction of the
    events. Its intervals keep their own stream's name.
    """
    compute = streams.get(COMPUTE_STREAM)
    if not compute or not isolated:
        return streams
    position = {index: k for k, index in enumerate(compute)}
    after: dict[int, list[int]] = {}
    for name, order in streams.items():
        if name == COMPUTE_STREAM:
            continue
        placed: dict[int, int] = {}
        previous = None
        for index in order:
            task = tasks[index]
            if not (isinstance(task, CollectiveTask) and task.participants == 1 and id(task.plan) in isolated
                    and len(task.deps) == 1 and task.deps[0] in position):
                break
            k = position[task.deps[0]]
            if k + 1 >= len(compute) or index not in tasks[compute[k + 1]].deps:
                break
            # The stream's previous call must be over before this one starts.
            if previous is not None and not (previous in placed and placed[previous] < k):
                break
            placed[index] = k
            previous = index
        else:
            for index, k in placed.items():
                after.setdefault(compute[k], []).append(index)
    if not after:
        return streams
    moved = {index for extra in after.values() for index in extra}
    walks = {name: order for name, order in streams.items() if name != COMPUTE_STREAM and order[0] not in moved}
    walks[COMPUTE_STREAM] = [i for index in compute for i in (index, *after.get(index, ()))]
    return walks


def inline_call_chains(tasks: tuple, streams: dict[str, list[int]], isolated: dict[int, float]
                       ) -> tuple[dict[str, list[int]], dict[int, int]]:
    """`inline_blocking_calls`, then, for streams it left whole, the chains of blocking solo calls
    that can be walked inside the compute walk: calls timed by formula, the first waiting for
    one compute task, each next one for the call before it, the last awaited by the compute
    task after (sequence parallelism's reduce-scatter then all-gather between two GEMM
    halves). The calls of such a stream that are left (the last call of a pass, that nothing
    after it waits for) keep their own walk; where the stream's order crosses from one walk
    to the other, the later call waits for the earlier one: the second value maps it to the
    call it waits for. Same timeline as walking each stream on its own, fewer events."""
    walks = inline_blocking_calls(tasks, streams, isolated)
    compute = walks.get(COMPUTE_STREAM)
    if not compute or not isolated:
        return walks, {}
    position = {index: k for k, index in enumerate(streams[COMPUTE_STREAM])}
    taken, k = set(), -1           # compute positions that calls already follow (one stream at most)
    for index in compute:
        if tasks[index].stream == COMPUTE_STREAM:
            k = position[index]
        else:
            taken.add(k)
    after: dict[int, list[int]] = {}
    order_deps: dict[int, int] = {}
    for name in sorted(walks):
        order = walks[name]
        if name == COMPUTE_STREAM:
            continue
        placed = _closed_chains(tasks, order, streams[COMPUTE_STREAM], position, isolated, taken)
        if not placed:
            continue
        for k, chain in placed.items():
            after.setdefault(streams[COMPUTE_STREAM][k], []).extend(chain)
        inlined = {i for chain in placed.values() for i in chain}
        for previous, index in zip(order, order[1:]):
            if (previous in inlined) != (index in inlined):
                order_deps[index] = previous
        walks[name] = [i for i in order if i not in inlined]
        taken |= set(placed)
    if not after:
        return walks, {}
    walks = {name: order for name, order in walks.items() if order}
    walks[COMPUTE_STREAM] = [i for index in compute for i in (index, *after.get(index, ()))]
    return walks, order_deps


def _closed_chains(tasks: tuple, order: list[int], compute: list[int], position: dict[int, int],
                   isolated: dict[int, float], taken: set[int]) -> dict[int, list[int]]:
    """A stream's chains of blocking solo calls, by the compute position they follow."""
    placed: dict[int, list[int]] = {}
    chain: list[int] = []
    k = last_k = -1
    for index in order:
        task = tasks[index]
        if not (isinstance(task, CollectiveTask) and task.participants == 1 and id(task.plan) in isolated
                and len(task.deps) == 1):
            chain = []
            continue
        dep = task.deps[0]
        if dep in position:
            chain, k = [index], position[dep]
        elif chain and dep == chain[-1]:
            chain.append(index)
        else:
            chain = []
            continue
        if k + 1 < len(compute) and index in tasks[compute[k + 1]].deps:
            if k > last_k and k not in taken:
                placed[k] = chain
                last_k = k
            chain = []
    return placed
