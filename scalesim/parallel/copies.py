"""A memory-bound copy kernel on a rank's compute stream: what framework glue around collectives
costs (torch's layout copies around sequence-parallel calls, FSDP's copy-in and copy-out)."""

from __future__ import annotations

from scalesim.costs.compute import KERNEL_OVERHEAD_S, streaming_bw_bytes_per_s


def copy_task(rp, name: str, kind: str, read_bytes: float, deps, written_bytes: float | None = None) -> int:
    """A kernel reading `read_bytes` and writing `written_bytes` [as many] after `deps`, at the GPU's
    streaming rate plus one launch, issued by the rank's host; returns its task index."""
    moved = read_bytes + (read_bytes if written_bytes is None else written_bytes)
    seconds = KERNEL_OVERHEAD_S + moved / streaming_bw_bytes_per_s(rp.b.gpu)
    return rp.compute(name, kind, seconds, 0.0, tuple(deps), host_s=rp.plan.host_dispatch_s)
