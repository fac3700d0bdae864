"""Where `scalesim validate`'s time goes: per case group CPU and wall, the leave-one-source-out
share, the import cost, and how long the pool's workers sat idle at the end.

    PYTHONPATH=. python benchmarks/validate_profile.py [--workers 2] [--only multi_node] [--fast]
        [--top 15] [--write]

Runs the same groups, in the same order, as `scalesim validate` (scalesim.app.loso.evaluate_all).
The machine may be shared: the load average is printed beside every figure, and CPU seconds
(per group, measured in the worker) compare better than wall time. `--write` records each
target's CPU seconds in validation/costs.json, which `validate` reads to start the longest
groups first (the costs only order the work; the predictions never depend on them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

IMPORTS = "import scalesim.app.loso, scalesim.app.run, scalesim.app.serve, scalesim.app.collective_bench"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def import_cost() -> tuple[float, float]:
    """(wall s, CPU s) of a fresh interpreter importing what a validate worker needs."""
    code = f"import time; t = time.process_time(); {IMPORTS}; print(time.process_time() - t)"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return time.perf_counter() - start, float(out.stdout.split()[-1])


def idle_tail(timings: list, workers: int) -> tuple[float, float]:
    """(seconds from the first worker finishing its last group to the end, idle fraction of the
    pool's worker-seconds between the first start and the last end)."""
    last_end = defaultdict(float)
    for *_, end, pid in timings:
        last_end[pid] = max(last_end[pid], end)
    first, end = min(t[3] for t in timings), max(t[4] for t in timings)
    ends = sorted(last_end.values()) + [first] * max(0, workers - len(last_end))
    busy = sum(t[4] - t[3] for t in timings)
    return end - ends[0], 1 - busy / (workers * (end - first)) if end > first else 0.0


def makespan(costs: list[float], workers: int) -> float:
    """When the last of `costs` (seconds, in start order) ends on `workers` workers, each taking
    the next job when it is free: the wall time an idle machine would need."""
    free = [0.0] * workers
    for cost in costs:
        free[free.index(min(free))] += cost
    return max(free)


def schedules(cost: dict, cases, workers: int) -> None:
    """Group CPU costs ({(target key, left out?): s}; a left-out job without its own costs its
    target's) played on an idle pool in the order of before this schedule (outside the quick
    subset first, then the rest, then the left-one-source-out jobs), in the order validate now
    uses, longest first by these costs, and the bound (total / workers, or the longest group)."""
    from scalesim.app.loso import load_costs, load_fits, longest_first, validation_jobs
    from scalesim.app.validate import target_key

    jobs = validation_jobs(cases, None, load_fits())
    keys = [(target_key(cases[g[0]]), left_out) for g, _, left_out in jobs]
    of = [cost.get(k, cost.get((k[0], False), 0.0)) for k in keys]
    old = sorted(range(len(jobs)), key=lambda k: (jobs[k][2], all(cases[i].fast for i in jobs[k][0])))
    orders = {"old order": old, "this order": longest_first(jobs, cases, load_costs()),
              "longest first": sorted(range(len(jobs)), key=lambda k: -of[k])}
    spans = ", ".join(f"{name} {makespan([of[k] for k in order], workers):.1f} s" for name, order in orders.items())
    print(f"idle-machine wall from CPU costs on {workers} workers ({sum(of):.1f} s in all): {spans}, "
          f"bound {max(sum(of) / workers, max(of)):.1f} s")


def report(timings: list, wall: float, workers: int, top: int) -> None:
    cpu = sum(t[2] for t in timings)
    loso = sum(t[2] for t in timings if t[1])
    tail, idle = idle_tail(timings, workers)
    print(f"groups {len(timings)} ({sum(1 for t in timings if t[1])} left-one-source-out); wall {wall:.1f} s; "
          f"group CPU {cpu:.1f} s (leave-one-source-out {loso:.1f} s, {loso / cpu:.0%}); {load()}")
    print(f"pool: idle tail {tail:.1f} s, idle share {idle:.0%} of {workers} workers x "
          f"{max(t[4] for t in timings) - min(t[3] for t in timings):.1f} s")
    print(f"\n{'CPU s':>7} {'wall s':>7} {'start s':>8}  target")
    first = min(t[3] for t in timings)
    for key, left_out, cpu_s, start, end, _ in sorted(timings, key=lambda t: -t[2])[:top]:
        print(f"{cpu_s:7.1f} {end - start:7.1f} {start - first:8.1f}  {'[loso] ' if left_out else ''}{key[:90]}")


def write_costs(timings: list, path: Path) -> None:
    costs = {}
    for key, left_out, cpu_s, *_ in timings:
        if not left_out or key not in costs:
            costs[key] = round(cpu_s, 2)
    path.write_text(json.dumps({"what": "CPU seconds per validation target (benchmarks/validate_profile.py "
                                        "--write); orders validate's work, never changes a result",
                                "cpu_s": dict(sorted(costs.items()))}, indent=1) + "\n")
    print(f"wrote {path} ({len(costs)} targets)")


def write_json(outcomes: list, replaced: dict, path: Path) -> None:
    from scalesim.app.loso import loso_summaries
    from scalesim.app.validate import summaries
    from scalesim.report.validation import validation_json

    data = validation_json(outcomes, summaries(outcomes), loso_summaries(outcomes, replaced), replaced)
    path.write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", help="one category")
    parser.add_argument("--fast", action="store_true", help="the quick subset")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--write", action="store_true", help="record each target's CPU s in validation/costs.json")
    parser.add_argument("--replay", action="store_true",
                        help="simulate nothing: play validation/costs.json's costs on an idle pool in each order")
    parser.add_argument("--json", type=Path, help="also write what `validate --json` prints to this file")
    args = parser.parse_args()
    from scalesim.app.loso import costs_file, evaluate_all
    from scalesim.app.validate import load_cases

    cases = [c for c in load_cases() if (args.only is None or c.category == args.only) and (not args.fast or c.fast)]
    if args.replay:
        from scalesim.app.loso import load_costs
        return schedules({(k, False): v for k, v in load_costs().items()}, cases, args.workers)
    wall, cpu = import_cost()
    print(f"imports: {wall:.2f} s wall, {cpu:.2f} s CPU per fresh process ({load()})")
    timings: list = []
    start = time.perf_counter()
    outcomes, replaced = evaluate_all(cases, None, args.workers, timings=timings)
    report(timings, time.perf_counter() - start, args.workers, args.top)
    schedules({(t[0], t[1]): t[2] for t in timings}, cases, args.workers)
    if args.json:
        write_json(outcomes, replaced, args.json)
    if args.write:
        write_costs(timings, costs_file())


if __name__ == "__main__":
    main()
