"""simpy's event loop and its most frequent events, made without simpy's per-call layers.

A step plays hundreds of thousands of events, and simpy's `Environment.step` (a method call
and a try block per event), `env.timeout` (a bound class, `__init__`, then `schedule`) and
`Event.succeed` (a check, then `schedule`) cost more than the engine's own work on many of
them. These do the same thing in one frame each: the same queue entries (time, priority,
event id from the environment's counter) in the same order, so the events run in exactly
the order simpy would run them and the timeline is the same, bit for bit. Like
`stretches.timer_at`, they rely on simpy's queue layout (simpy is pinned below 4.2).
"""

from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.events import NORMAL, PENDING, Timeout

_new_timeout = Timeout.__new__
_new_event = simpy.Event.__new__


def run(env: simpy.Environment) -> None:
    """`env.run()` until no event is left: each event's callbacks in turn, in queue order; an
    event that failed with no one to handle it (a walk that raised) raises here, as in simpy."""
    queue = env._queue
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


def timeout(env: simpy.Environment, delay: float) -> Timeout:
    """`env.timeout(delay)`: a Timeout that fires at now + delay, with the same queue entry."""
    if delay < 0:
        raise ValueError(f"Negative delay {delay}")
    event = _new_timeout(Timeout)
    event.env = env
    event.callbacks = []
    event._value = None
    event._delay = delay
    event._ok = True
    heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), event))
    return event


def succeed(event: simpy.Event) -> None:
    """`event.succeed()`: trigger it now (it must be pending), queued as simpy queues it."""
    if event._value is not PENDING:
        raise RuntimeError(f"{event} has already been triggered")
    event._ok = True
    event._value = None
    env = event.env
    heappush(env._queue, (env._now, NORMAL, next(env._eid), event))


def all_of(env: simpy.Environment, pending: list) -> simpy.Event:
    """`env.all_of(pending)` for pending events that succeed (a walk's dependencies): an event that
    is triggered, with the same queue entry, when the last of them is processed, and runs its own
    callbacks in the same place. simpy's condition also makes a tuple of the events, checks each
    one's environment, counts through a bound method with failure handling, and builds a value
    nobody reads (a callback of its own) when it is processed."""
    done = _new_event(simpy.Event)            # simpy.Event(env), without its __init__
    done.env, done.callbacks, done._value = env, [], PENDING
    left = len(pending)

    def check(_event) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            succeed(done)

    for event in pending:
        event.callbacks.append(check)
    return done


def awaited_events(env: simpy.Environment, tasks: tuple, walks: dict[str, list[int]], order_deps: dict[int, int],
                   host_syncs: bool) -> tuple[list, list[tuple[int, ...]]]:
    """A rank's events, one per task another walk waits for (None for the rest: their own walk's
    order covers them), and per task what it waits for on other walks (its deps there and
    `order_deps`, the stream order that crosses walks). `host_syncs`: the rank's host thread
    waits for its sync tasks, so they get events too."""
    count = len(tasks)
    walk_of = [0] * count
    for k, order in enumerate(walks.values()):
        for index in order:
            walk_of[index] = k
    awaited = set(order_deps.values())
    for index, task in enumerate(tasks):
        own = walk_of[index]
        for dep in task.deps:
            if walk_of[dep] != own:
                awaited.add(dep)
    if host_syncs:
        awaited.update(index for index, task in enumerate(tasks) if task.host_sync)
    events: list = [None] * count
    for index in awaited:
        events[index] = simpy.Event(env)
    crossing = []
    for index, task in enumerate(tasks):
        deps = task.deps
        if index in order_deps:
            deps = deps + (order_deps[index],)
        crossing.append(tuple([d for d in deps if events[d] is not None]) if deps else ())
    return events, crossing
