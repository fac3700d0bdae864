"""Plans simulated per minute by a `--search` sweep on each executor.

Run: python benchmarks/sweep_executors.py [--scenario FILE] [--gpus N] [--runs local:1,local:2,dask-local:2]
Default: Llama 3 70B on 64 H100 (scenarios/64xh100-llama3-70b.yaml) searched at
64 GPUs: about 1,200 plans, 4 of them simulated after the memory checks and
pruning (45 before the step-time bound of scalesim/parallel/bounds.py) (the checks, about 5 s, run in the main process on every executor).
Wall time covers the whole sweep, pool or cluster start-up included; each run
also checks that its rows equal the first run's. The last column is the
machine's 1-minute load average before the run: figures taken on a busy
machine understate what more workers gain. dask-local needs
`pip install 'scalesim[dask]'`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from scalesim.app.executors import parse_executor
from scalesim.scenario import load_scenario
from scalesim.app.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "64xh100-llama3-70b.yaml"))
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--runs", default="local:1,local:2,dask-local:2", help="executor:workers, comma-separated")
    args = parser.parse_args()
    scenario, file = load_scenario(Path(args.scenario))
    print(f"{scenario.name}, --search at {args.gpus} GPUs")
    print(f"{'executor':<14} {'workers':>7} {'wall s':>8} {'plans':>6} {'simulated':>9} "
          f"{'simulated/min':>13} {'plans/min':>10} {'load before':>11}")
    reference = None
    for run in args.runs.split(","):
        name, workers = run.rsplit(":", 1)
        executor = parse_executor(name, int(workers))
        load = os.getloadavg()[0]
        start = time.perf_counter()
        sweep = run_sweep(scenario, file, [args.gpus], search=True, executor=executor)
        wall_s = time.perf_counter() - start
        rows = sweep["rows"]
        simulated = sum(r["step_time_s"] is not None for r in rows)
        if reference is None:
            reference = rows
        assert rows == reference, f"{run} found other rows than {args.runs.split(',')[0]}"
        print(f"{name:<14} {workers:>7} {wall_s:>8.1f} {len(rows):>6} {simulated:>9} "
              f"{simulated / wall_s * 60:>13.1f} {len(rows) / wall_s * 60:>10.0f} {load:>11.1f}", flush=True)


if __name__ == "__main__":
    main()
