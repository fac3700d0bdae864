"""Wall time to simulate one 1 GiB all-reduce on 8 GPUs (one DGX H100) and 64 GPUs (8 nodes, NDR).

Run: python benchmarks/collective.py
Times planning (algorithm choice with `auto`, which times every candidate
alone) and playing the call out in the engine, separately; median of 5.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scalesim.app.collective_bench import time_collective  # noqa: E402
from scalesim.collectives import plan_collective  # noqa: E402
from scalesim.topology import Fabric, build_cluster, load_node_design  # noqa: E402

GiB = 2**30


def main() -> None:
    print(f"{'GPUs':>5} {'algo':>10} {'plan s':>9} {'plan+simulate s':>16} {'busbw GB/s':>11}")
    for nodes in (1, 8):
        fabric = Fabric("ib-ndr", 8, "rail-optimized") if nodes > 1 else None
        plans, totals = [], []
        for _ in range(5):
            topology = build_cluster(load_node_design("dgx-h100"), nodes=nodes, fabric=fabric)
            start = time.perf_counter()
            plan_collective("all_reduce", topology, tuple(range(8 * nodes)), GiB)
            plans.append(time.perf_counter() - start)
            topology = build_cluster(load_node_design("dgx-h100"), nodes=nodes, fabric=fabric)
            start = time.perf_counter()
            row = time_collective(topology, "all_reduce", 8 * nodes, GiB)
            totals.append(time.perf_counter() - start)
        print(f"{8 * nodes:>5} {row.algo:>10} {statistics.median(plans):>9.4f} {statistics.median(totals):>16.4f} "
              f"{row.busbw_GBps:>11.1f}")


if __name__ == "__main__":
    main()
