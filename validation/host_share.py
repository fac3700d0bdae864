"""How much of each case's predicted step the host decides: which cases can test the host model (issue 17).

Run: python validation/host_share.py [ID_PREFIX ...]      (default: neusight-)
Prints, for every step-time or throughput case whose id starts with a prefix: measured and predicted value and the
error in the case's metric (validate's sign), the host's CPU time per step (`StepResult.host["cpu_s"]`: the layers' kernel launches, FSDP hooks, the rest) as a
share of the predicted step, and the time the GPU waited for the host (`breakdown.host_bound`) as a share.
A case whose host-bound share is near zero cannot say anything about the host's per-op dispatch cost
(scalesim/costs/host.py, DISPATCH_S_PER_OP): its error is the kernels' and the links'. Then the cases'
errors grouped by GPU and by parallelism (the largest of dp / tp / pp, "zero3" for FSDP).
A diagnostic only: nothing here changes what `run` or `validate` compute.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalesim.app.run import run  # noqa: E402
from scalesim.app.validate import load_cases  # noqa: E402
from scalesim.scenario import load_scenario  # noqa: E402

VALIDATION = ROOT / "validation"
# The case metrics read off a run (validate's sign: step time negative = predicted too fast, rates positive).
METRICS = {"step_time_s": lambda r: r.step_time_s, "samples_per_s": lambda r: r.samples_per_s,
           "tokens_per_s_per_gpu": lambda r: r.tokens_per_s / r.gpus if r.tokens_per_s else float("nan")}


def rows(prefixes: tuple[str, ...]) -> list[dict]:
    out = []
    for case in load_cases():
        if not case.id.startswith(prefixes) or case.metric not in METRICS or not case.scenario:
            continue
        try:
            r = run(*load_scenario(VALIDATION / case.scenario), baseline=False)
        except Exception as e:          # a case validate skips or cannot run: say so, keep going
            print(f"{case.id}: not run ({e})", file=sys.stderr)
            continue
        predicted = METRICS[case.metric](r)
        cpu = sum(r.host["cpu_s"].values()) if r.host else 0.0
        p = r.plan
        split = max((("dp", p.get("dp", 1)), ("tp", p.get("tp", 1)), ("pp", p.get("pp", 1))), key=lambda kv: kv[1])
        out.append({"id": case.id, "measured": case.measured, "predicted": predicted,
                    "error": (predicted - case.measured) / case.measured,
                    "host_cpu": cpu / r.step_time_s, "host_bound": r.breakdown.host_bound / r.step_time_s,
                    "gpu": f"{r.gpus}x {r.gpu_name}",
                    "split": (f"{split[0]}{split[1]}" + (" zero3" if p.get("zero", 0) >= 3 else "")) if split[1] > 1 else "1 GPU",
                    "disputed": bool(case.disputed)})
    return out


def grouped(table: list[dict], key: str) -> None:
    groups: dict[str, list[float]] = {}
    for row in table:
        if not row["disputed"]:
            groups.setdefault(row[key], []).append(row["error"])
    for name, errors in sorted(groups.items()):
        print(f"  {name:<28} n={len(errors):<3} median {100 * statistics.median(errors):+6.1f}%  "
              f"range {100 * min(errors):+6.1f} .. {100 * max(errors):+6.1f}%")


def main(argv: list[str]) -> None:
    table = rows(tuple(argv) or ("neusight-",))
    print(f"{'case':<54} {'measured':>10} {'predicted':>10} {'error':>7} {'host cpu':>8} {'host-bound':>10}")
    for row in table:
        print(f"{row['id']:<54} {row['measured']:>10.5g} {row['predicted']:>10.5g} {100 * row['error']:>+6.1f}% "
              f"{100 * row['host_cpu']:>7.1f}% {100 * row['host_bound']:>9.1f}%{'  disputed' if row['disputed'] else ''}")
    print("by GPU (disputed left out):")
    grouped(table, "gpu")
    print("by parallelism (disputed left out):")
    grouped(table, "split")


if __name__ == "__main__":
    main(sys.argv[1:])
