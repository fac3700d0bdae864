"""Wall time to simulate one training step, at growing GPU counts.

Run: python benchmarks/step_time.py [SCENARIO ...]
Prints, per scenario and GPU count, the median and best of several runs of
building the step program and playing it out in the engine (scenario
parsing and catalog loading excluded, as they happen once per process).
Target (issue 2): one 8-GPU DDP step under 0.2 s on a 2-core machine.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalesim.engine import simulate  # noqa: E402
from scalesim.parallel import build_program  # noqa: E402
from scalesim.app.setup import prepare  # noqa: E402
from scalesim.scenario import load_scenario  # noqa: E402

REPEATS = 7


def time_step(setup, symmetric: bool) -> tuple[float, float, int]:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric)
        timeline = simulate(program)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), len(timeline.intervals)


def main(paths: list[str]) -> None:
    paths = paths or [str(ROOT / "scenarios" / n) for n in ("8x4090-ddp.yaml", "8xa100-ddp.yaml", "8xh100-ddp.yaml")]
    print("every rank simulated (full) and one rank per stage (symmetric, what runs beyond 16 GPUs)")
    print(f"{'scenario':<18} {'GPUs':>5} {'mode':>9} {'tasks':>7} {'median s':>10} {'best s':>10}")
    for path in paths:
        scenario, file = load_scenario(path)
        base = prepare(scenario, file)
        per_gpu_batch = base.plan.micro_batch * base.plan.micro_batches
        for gpus in (1, 2, 4, 8):
            if gpus > base.gpus:
                break
            changed = scenario.with_changes(training={"global_batch": per_gpu_batch * gpus}, parallel={"dp": None})
            setup = prepare(changed, file, gpus=gpus)
            for symmetric in (False, True):
                median, best, tasks = time_step(setup, symmetric)
                mode = "symmetric" if symmetric else "full"
                print(f"{Path(path).stem:<18} {gpus:>5} {mode:>9} {tasks:>7} {median:>10.4f} {best:>10.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
