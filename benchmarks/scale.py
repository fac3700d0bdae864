"""Wall time and peak memory to simulate one training step at growing GPU counts.

Run: python benchmarks/scale.py [--max-gpus N] [--timeout S]
Each size runs in its own process (so peak memory is its own): Llama 3 70B,
bf16, sequence 8192, micro-batch 1, 8 micro-batches per data-parallel
replica, TP 8 inside DGX H100 nodes, 4 pipeline stages (1 at 8 GPUs), data
parallel across the rest over a rail-optimized NDR fabric. Issue #6 targets on
the 2-core machine: 1,024 GPUs under 1 s, 16,384 under 5 s, under 2 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (8, 64, 512, 1024, 4096, 16384)


def scenario(gpus: int) -> dict:
    pp = 1 if gpus == 8 else 4
    dp = gpus // (8 * pp)
    cluster = {"node": "dgx-h100", "nodes": gpus // 8}
    if gpus > 8:
        cluster["fabric"] = {"link": "ib-ndr", "nics_per_node": 8, "topology": "rail-optimized"}
    return {"name": f"scale-{gpus}", "cluster": cluster, "model": "llama3-70b",
            "training": {"precision": "bf16", "seq_len": 8192, "global_batch": 8 * dp, "micro_batch": 1,
                         "activation_checkpointing": "full"},
            "parallel": {"tp": 8, "pp": pp, "dp": dp, "zero": 1, "sequence_parallel": True}}


def child(gpus: int) -> None:
    sys.path.insert(0, str(ROOT))
    from scalesim.app.setup import prepare, simulate_setup
    from scalesim.scenario import Scenario

    setup = prepare(Scenario.model_validate(scenario(gpus)))
    start = time.perf_counter()
    timeline = simulate_setup(setup)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"gpus": gpus, "wall_s": seconds, "peak_mb": peak_mb, "step_s": timeline.end_s,
                      "tasks": len(timeline.intervals)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gpus", type=int, default=SIZES[-1])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print(f"{'GPUs':>6} {'wall s':>9} {'peak MB':>8} {'simulated step s':>17} {'tasks':>7}")
    for gpus in (g for g in SIZES if g <= args.max_gpus):
        try:
            out = subprocess.run([sys.executable, __file__, "--child", str(gpus)], capture_output=True,
                                 text=True, timeout=args.timeout)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{gpus:>6} {row['wall_s']:>9.2f} {row['peak_mb']:>8.0f} {row['step_s']:>17.3f} {row['tasks']:>7}")
        except subprocess.TimeoutExpired:
            print(f"{gpus:>6} {'> ' + str(int(args.timeout)):>9} (timed out)")
        except (ValueError, IndexError):
            print(f"{gpus:>6} failed: {out.stderr.strip()[-300:]}")


if __name__ == "__main__":
    main()
