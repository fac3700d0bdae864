"""A rank's host thread: when the CPU has issued each task (the engine waits for it).

Between two syncs the host issues tasks back to back in program order, each
after its own CPU time, so a task's issue time is the last release plus the
CPU time of the tasks since; only a sync (a `.item()`, Megatron's P2P
synchronize) makes it wait for the GPU. Pure bookkeeping; the simulator
plays it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class HostThread:
    """A rank's host thread as issue times: from each release (the step's start, or the end of a
    `host_sync` task) it issues the following tasks back to back, each after its own host_s."""

    offset_s: list[float]            # per task: CPU time from its segment's release to its issue
    segment: list[int]               # per task: the sync task it is issued after (-1: none)
    released_s: dict[int, float] = field(default_factory=dict)   # sync task -> when it finished


def host_thread(tasks: tuple) -> HostThread | None:
    """The rank's host thread, or None when issuing costs nothing and never waits."""
    if not any(t.host_s > 0 or t.host_sync for t in tasks):
        return None
    offsets, segments = [], []
    elapsed_s, segment = 0.0, -1
    for index, task in enumerate(tasks):
        elapsed_s += task.host_s
        offsets.append(elapsed_s)
        segments.append(segment)
        if task.host_sync:
            elapsed_s, segment = 0.0, index
    return HostThread(offsets, segments)
