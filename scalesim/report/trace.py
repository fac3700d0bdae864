"""The simulated step as a Chrome trace-event file, for Perfetto or chrome://tracing.

Format: Google's "Trace Event Format" (JSON object with a `traceEvents`
list). Each task is a complete event (`"ph": "X"`) with `ts` and `dur` in
microseconds; each GPU is a process (`pid` = rank) and each of its streams a
thread (`tid`), named by `process_name` / `thread_name` metadata events
(`"ph": "M"`), so Perfetto shows one track per GPU and stream.

Large runs simulate one rank per pipeline stage for its identical peers
(`gpus` > the simulated ranks); their tracks say how many GPUs each stands for.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalesim.outputs import TRACE_GENERATOR
from scalesim.timeline import Timeline

US_PER_S = 1e6
GPU_WORK_KINDS = ("forward", "backward", "recompute", "optimizer", "other")   # compute tasks, not calls
STREAM_ORDER = ("compute", "comm")


def _stream_ids(streams: set[str]) -> dict[str, int]:
    ordered = [s for s in STREAM_ORDER if s in streams] + sorted(streams - set(STREAM_ORDER))
    return {s: k for k, s in enumerate(ordered)}


def chrome_trace(timeline: Timeline, *, title: str = "scalesim step", gpus: int | None = None) -> dict:
    """The timeline as a trace-event object: metadata first, then tasks in start order.

    `gpus`: the run's GPU count, when the timeline holds fewer (representative) ranks.
    """
    tids = _stream_ids({iv.stream for iv in timeline.intervals})
    ranks = sorted({iv.rank for iv in timeline.intervals})
    stands_for = gpus // len(ranks) if gpus and ranks and gpus > len(ranks) else 1
    events: list[dict] = []
    for rank in ranks:
        name = f"GPU {rank}" + (f" (stands for {stands_for} identical GPUs)" if stands_for > 1 else "")
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for stream, tid in tids.items():
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": stream}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid,
                           "args": {"sort_index": tid}})
    for iv in sorted(timeline.intervals, key=lambda iv: (iv.start_s, iv.rank, tids[iv.stream], iv.name)):
        event = {"name": iv.name, "cat": iv.kind, "ph": "X", "pid": iv.rank, "tid": tids[iv.stream],
                 "ts": iv.start_s * US_PER_S, "dur": max(iv.end_s - iv.start_s, 0.0) * US_PER_S}
        if iv.ready_s < iv.start_s:
            # A call waits for its peers; GPU work whose inputs were ready waits for its host to
            # issue it (the host thread of costs/host.py).
            waited = "waited_for_peers_us" if iv.kind not in GPU_WORK_KINDS else "waited_for_host_us"
            event["args"] = {waited: (iv.start_s - iv.ready_s) * US_PER_S}
        events.append(event)
    return {"otherData": {**TRACE_GENERATOR, "title": title, "step_time_s": timeline.end_s, "time_unit": "us",
                          "gpus": gpus or len(ranks), "simulated_gpus": len(ranks)},
            "traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(timeline: Timeline, path: Path, *, title: str = "scalesim step", gpus: int | None = None) -> Path:
    """Write the trace as JSON to `path` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(timeline, title=title, gpus=gpus)))
    return path
