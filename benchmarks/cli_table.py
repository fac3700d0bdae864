"""Issue 20's table: wall time of the commands a user runs, whole process, median of runs.

Run: python benchmarks/cli_table.py [--runs 3] [--only NAME ...] [--root DIR ...]
Each command runs as `python -m scalesim ...` in a fresh process (imports,
plots and the scaling curve included), from the repository root (or each
--root, other checkouts to compare with, taken first on PYTHONPATH; their runs
alternate, so they see the same machine load). Prints the median and the
spread of the runs per root, the median CPU time (user + system, the command
and every process it started: less sensitive to a loaded machine than wall
time), and the machine's 1-minute load average before the first run: compare
figures only when taken back to back.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

# name -> (arguments after `scalesim`, target seconds from issue 20)
COMMANDS = {
    "8x4090-ddp": (["run", "scenarios/8x4090-ddp.yaml"], 0.8),
    "64xh100-llama3-70b": (["run", "scenarios/64xh100-llama3-70b.yaml"], 1.5),
    "1024xa100-gpt3-175b": (["run", "scenarios/1024xa100-gpt3-175b.yaml"], 2.0),
    "16384xh100-llama3-405b": (["run", "scenarios/16384xh100-llama3-405b.yaml"], 3.0),
    "does-not-fit (13B, 8x A100)": (["run", str(HERE / "scenarios" / "8xa100-llama2-13b-nofit.yaml")], 3.0),
    "sweep --search 70B, 8+16 H100": (["sweep", str(HERE / "scenarios" / "h100-llama3-70b-search.yaml"),
                                       "--gpus", "8,16", "--search", "--force"], 20.0),
}


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall_s(args: list[str], root: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of the command (CPU: it and the processes it waited for)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    extra = ["--out", str(out)] if args[0] == "sweep" else []
    cpu = _children_cpu_s()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "scalesim", *args, *extra], cwd=root, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 3):      # 3: simulated, does not fit
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed, _children_cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="row names (substrings) to run")
    parser.add_argument("--root", type=Path, action="append", default=None,
                        help="checkout to time, repeatable [this one]")
    options = parser.parse_args()
    roots = options.root or [ROOT]
    print(f"load average before: {os.getloadavg()[0]:.2f}; {options.runs} runs each; roots "
          + ", ".join(map(str, roots)))
    print("| command | " + " | ".join(f"median s ({r.name}) | min-max s | CPU s" for r in roots) + " | target s |")
    print("|---|" + "---:|---:|---:|" * len(roots) + "---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (args, target) in COMMANDS.items():
            if options.only and not any(o in name for o in options.only):
                continue
            times: dict[Path, list[tuple[float, float]]] = {r: [] for r in roots}
            for _ in range(options.runs):
                for r in roots:
                    times[r].append(wall_s(args, r, Path(tmp) / "sweep"))
            shown = f"`{' '.join(args[:2])}`" if args[0] == "run" and "/" in args[1][:10] else name
            cells = []
            for runs in times.values():
                wall = [w for w, _ in runs]
                cells.append(f"{statistics.median(wall):.2f} | {min(wall):.2f}-{max(wall):.2f} | "
                             f"{statistics.median(c for _, c in runs):.2f}")
            print(f"| {shown} | " + " | ".join(cells) + f" | {target:g} |", flush=True)


if __name__ == "__main__":
    main()
