"""Plan-search throughput in one process: how long one plan takes, and plans decided per minute.

Run: python benchmarks/plans_per_minute.py [--scenario FILE] [--gpus 64] [--sample 8] [--root DIR]
Default: Llama 3 70B on 64 H100 (scenarios/64xh100-llama3-70b.yaml). Prints the median
in-process wall time of `evaluate_point` (build, simulate, cost one plan) over a sample of the
plans that fit, and the whole `--search` at that GPU count in this process (memory checks,
pruning by the step-time bound, simulations): plans decided per minute on one core.
Issue 20's target: a median under 20 ms per plan (over 3,000 plans a minute on 2 cores).
CPU times are printed beside wall times (a loaded machine stretches the wall clock); `--root`
times another checkout's code with this script. `--shared-caches`: the sampled plans share one
`Caches`, as the plans a search simulates in one process do (its clusters, collective plans and
layer timings), after one untimed pass over them; without it each plan is timed from scratch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv[:-1]:                 # before importing scalesim: whose code is timed
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))

from scalesim.scenario import load_scenario  # noqa: E402
from scalesim.app.caches import Caches  # noqa: E402
from scalesim.app.plans import check_points, cluster_for, search_points  # noqa: E402
from scalesim.app.sweep import evaluate_point, run_sweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "64xh100-llama3-70b.yaml"))
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--sample", type=int, default=8, help="fitting plans timed one by one")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose code is timed [this one]")
    parser.add_argument("--shared-caches", action="store_true", help="the sampled plans share one Caches, as in a search")
    options = parser.parse_args()
    base, file = load_scenario(options.scenario)
    grown, _ = cluster_for(base, options.gpus, file)
    points, _ = search_points(base, options.gpus, file)
    rows = check_points(points, base, file, {options.gpus: grown})
    fitting = [p for p, r in zip(points, rows) if r["status"] == "ok"]
    step = max(1, len(fitting) // options.sample)
    sample = fitting[::step][:options.sample]
    caches = Caches() if options.shared_caches else None
    for p in sample if caches is not None else []:
        evaluate_point(p, base, file, grown, caches=caches)
    times, cpu = [], []
    for p in sample:
        start, start_cpu = time.perf_counter(), time.process_time()
        evaluate_point(p, base, file, grown, caches=caches)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    median = statistics.median(times)
    print(f"load average {os.getloadavg()[0]:.2f}; {len(points)} plans at {options.gpus} GPUs, "
          f"{len(fitting)} fit in memory")
    print(f"one plan (median of {len(times)} fitting plans, in-process{'' if caches is None else ', caches shared'}): "
          f"{median * 1e3:.0f} ms "
          f"(min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f}) = {60 / median:,.0f} simulated plans "
          f"per minute per core (target: under 20 ms); CPU {statistics.median(cpu) * 1e3:.0f} ms")
    start, start_cpu = time.perf_counter(), time.process_time()
    result = run_sweep(base, file, [options.gpus], search=True)
    wall = time.perf_counter() - start
    summary = result["summary"][options.gpus]
    print(f"whole search in one process: {wall:.1f} s for {len(points)} plans = {len(points) / wall * 60:,.0f} "
          f"plans decided per minute ({summary}); CPU {time.process_time() - start_cpu:.1f} s")


if __name__ == "__main__":
    main()
