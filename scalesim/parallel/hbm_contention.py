"""HBM bandwidth NCCL's kernels take from compute that overlaps them.

NCCL's blocks hold SMs (collectives/kernels.py), and they also move data through
the GPU's memory: what a GPU receives is stored to memory and read back, and
its input or output lives in user buffers too. S. Jeaugey (NVIDIA), on
compute kernels slowed while an all-gather runs (NVIDIA/nccl#1428): "300GB/s
needs to be multiplied by at least 2x for memory bandwidth, as we need to store
to memory, then read back from it. If you add reading from or writing to user
data, it can be 3x." and, of a send/recv beside a GEMM on spare SMs
(NVIDIA/nccl#1433): "You may not compete for SMs but still compete for memory
bandwidth." Every collective step reads or writes user data (an all-gather
writes each received chunk to its output, a reduce-scatter or all-reduce reads
its own chunk to add), so a call takes HBM_BYTES_PER_BUS_BYTE (3) times its
bus bandwidth (nccl-tests' busbw: what each GPU's links carry) from the HBM of
every member; the source gives no per-collective figure, so one factor for all.

While a call runs, a compute task on its ranks is timed on a GPU whose memory
bandwidth is less that traffic: memory-bound kernels (elementwise, norms,
optimizer, attention's score passes, GEMMs whose operands bound them) slow down,
GEMMs at their compute bound do not (costs/compute.py takes the larger of the
two times). This is folded into the same per-task factors as the SMs NCCL holds
(Program.held_factors, one per SM share the calls hold): a share stands for the
calls that hold it, whose traffic is their bus bandwidth alone (collectives/
estimate.py), time-weighted over the program's calls of that share.

What it moves (validate, Dec 2026, memcont12, against main 091a76f): little. Framework
memory-bound kernels on A100/H100 are bound by the SMs' issue rate (STREAM_BYTES_PER_SM_CYCLE,
costs/compute.py: 1.57 TB/s on the 108 SMs an H100 keeps beside a 24-block NVLink call), below
the HBM an NVLink ring leaves (2.81 achieved - 1.07 TB/s of NCCL traffic = 1.74 TB/s); thin
GEMMs, DRAM-bound GDDR cards and two calls at once do feel it. Reference median 3.85 -> 3.76%,
LOSO median unchanged (3.88%); torchtitan's Llama 3.1 8B FSDP on H100 0.5-0.9 points less fast;
fms-fsdp's H100 7B HSDP unchanged (+17.4%).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from scalesim.collectives.busbw import busbw_bytes_per_s
from scalesim.collectives.estimate import plan_time_s
from scalesim.hardware import GpuSpec
from scalesim.program import CollectiveTask

HBM_BYTES_PER_BUS_BYTE = 3.0        # NVIDIA/nccl#1428 (S. Jeaugey): 2x, "it can be 3x" with user data
# However much NCCL moves, compute keeps at least this fraction of the GPU's memory bandwidth
# (a guard: the figures above give 5-45% to NCCL on shipped GPUs).
MIN_HBM_FRACTION = 0.25


def share_traffic(tasks: dict[int, tuple], capacity, memo: dict | None = None) -> dict[float, tuple]:
    """Per SM share a call holds: the HBM bytes a second NCCL moves on each member while such
    calls run (their bus bytes over their times alone, x HBM_BYTES_PER_BUS_BYTE), and the links
    they cross."""
    held = [t for ts in {id(ts): ts for ts in tasks.values()}.values()    # ranks built once share their tuple
            for t in ts if t.__class__ is CollectiveTask and t.sm_share > 0]   # (no subclasses: cheaper than isinstance)
    plans = {id(t.plan): t.plan for t in held}
    sums: dict[float, list] = {}
    for (share, key), count in Counter((t.sm_share, id(t.plan)) for t in held).items():
        plan = plans[key]
        time_s = plan_time_s(plan, capacity, memo)
        bus = busbw_bytes_per_s(plan.op, len(plan.ranks), plan.size_bytes, time_s) if time_s > 0 else 0.0
        acc = sums.setdefault(share, [0.0, 0.0, set()])
        acc[0] += count * bus * time_s
        acc[1] += count * time_s
        acc[2].update(link for phase in plan.phases for f in phase.flows for link in f.links)
    return {share: (HBM_BYTES_PER_BUS_BYTE * b / s if s > 0 else 0.0, frozenset(links))
            for share, (b, s, links) in sums.items()}


def held_shares(traffic: dict[float, tuple]) -> list[tuple[float, float]]:
    """(SM share, HBM bytes/s) of one call at a time or two at once (ZeRO-3's gathers and
    reductions run on separate streams), sorted by share. Two calls on the same links split
    their bandwidth (the busier one's traffic), on separate links each moves its own (the sum);
    a share one call holds alone keeps that call's traffic."""
    single = sorted(traffic)
    shares = {s: traffic[s][0] for s in single}
    for i, a in enumerate(single):
        for b in single[i:]:
            if a + b < 1:
                (ta, la), (tb, lb) = traffic[a], traffic[b]
                shares.setdefault(a + b, max(ta, tb) if la & lb else ta + tb)
    return sorted(shares.items())


def contended(gpu: GpuSpec, traffic_bytes_per_s: float) -> GpuSpec:
    """The GPU as compute sees it while NCCL moves `traffic_bytes_per_s` through its memory: the
    achieved bandwidth (memory_bw x its efficiency) less that traffic, at least MIN_HBM_FRACTION."""
    if traffic_bytes_per_s <= 0 or gpu.memory_bw_efficiency <= 0:
        return gpu
    left = max(gpu.memory_bw_bytes_per_s - traffic_bytes_per_s / gpu.memory_bw_efficiency,
               gpu.memory_bw_bytes_per_s * MIN_HBM_FRACTION)
    return replace(gpu, memory_bw_bytes_per_s=left)
