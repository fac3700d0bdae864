"""Fast-forward equals the full simulation: every shipped and validation training scenario, by hand.

Run: python validation/fast_forward_equality.py [--only SUBSTRING] [FILES...]
For each training scenario (scenarios/*.yaml, validation/scenarios/*.yaml by default) it compiles
the step `run` simulates, plays it with the fast-forward (engine/fast_forward.py) and whole
(`exact=True`), and prints one line: the tasks, whether periods were skipped, both wall times,
and the differences: step time (relative), breakdown of the critical rank (largest difference,
over the step time), bytes sent and delivered, per-rank SM slowdowns, and every interval (largest
difference in seconds, after matching intervals per rank and stream). The last line counts
failures: a step time more than 1e-9 apart (relative), or any interval more than 1e-9 of the
step apart, or a name or kind that does not match. Exit code 1 when any fails. Steps the
fast-forward does not take (too few tasks, no repeating periods) are listed without the full run;
scenarios of validation cases marked `skip:` (too slow to simulate yet) are left out.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scalesim.app.setup import prepare  # noqa: E402
from scalesim.engine.fast_forward import fast_forward  # noqa: E402
from scalesim.engine.simulator import played, simulate  # noqa: E402
from scalesim.errors import InputError  # noqa: E402
from scalesim.result import breakdown, critical_rank  # noqa: E402
from scalesim.scenario import load_scenario  # noqa: E402
from scalesim.yaml_load import read_yaml  # noqa: E402

LIMIT = 1e-9


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300) if a != b else 0.0


def interval_gap(fast, full) -> tuple[float, int]:
    """Largest time difference between matched intervals, and how many could not be matched by name."""
    def streams(timeline):
        out: dict[tuple, list] = {}
        for iv in sorted(timeline.intervals, key=lambda iv: (iv.rank, iv.stream, iv.start_s, iv.end_s)):
            out.setdefault((iv.rank, iv.stream), []).append(iv)
        return out
    a, b = streams(fast), streams(full)
    if a.keys() != b.keys():
        return float("inf"), -1
    worst, unmatched = 0.0, 0
    for key, left in a.items():
        right = list(b[key])
        if len(left) != len(right):
            return float("inf"), -1
        for k, iv in enumerate(left):
            # equal start times may come in either order: look a few places ahead for the same task
            for j in range(k, min(k + 8, len(right))):
                other = right[j]
                if other is not None and (other.name, other.kind) == (iv.name, iv.kind):
                    right[j] = None
                    right[k], right[j] = right[j], right[k]
                    worst = max(worst, abs(iv.ready_s - other.ready_s), abs(iv.start_s - other.start_s),
                                abs(iv.end_s - other.end_s))
                    break
            else:
                unmatched += 1
    return worst, unmatched


def compare(path: Path) -> tuple[str, bool]:
    scenario, file = load_scenario(path)
    program = prepare(scenario, file).step.program
    tasks = sum(len(t) for t in program.tasks.values())
    start = time.perf_counter()
    fast = fast_forward(program, played)
    fast_s = time.perf_counter() - start
    if fast is None:
        return f"{path.name:<60} {tasks:>8}  played whole ({fast_s:.2f} s to decide)", True
    start = time.perf_counter()
    full = simulate(program, exact=True)
    full_s = time.perf_counter() - start
    step = relative(fast.end_s, full.end_s)
    rank = critical_rank(full)
    parts_fast, parts_full = breakdown(fast.for_rank(rank), fast.end_s), breakdown(full.for_rank(rank), full.end_s)
    parts = max(abs(getattr(parts_fast, f.name) - getattr(parts_full, f.name)) for f in fields(parts_full)
                ) / full.end_s
    sent = max(relative(fast.bytes_sent, full.bytes_sent), relative(fast.bytes_delivered, full.bytes_delivered))
    slowed = max((abs(fast.compute_slowdown_s.get(r, 0.0) - full.compute_slowdown_s.get(r, 0.0))
                  for r in set(fast.compute_slowdown_s) | set(full.compute_slowdown_s)), default=0.0)
    gap, unmatched = interval_gap(fast, full)
    ok = (step <= LIMIT and parts <= LIMIT and sent <= LIMIT and gap <= LIMIT * full.end_s and unmatched == 0
          and critical_rank(fast) == rank)
    return (f"{path.name:<60} {tasks:>8}  fast {fast_s:6.2f} s  full {full_s:6.2f} s  step {step:.1e}  "
            f"breakdown {parts:.1e}  bytes {sent:.1e}  slowed {slowed:.1e} s  intervals {gap:.1e} s"
            f"{'' if unmatched == 0 else f' UNMATCHED {unmatched}'}  {'ok' if ok else 'FAIL'}"), ok


def training_files(only: str | None) -> list[Path]:
    """Training scenarios, but those of validation cases marked `skip:` (too slow to simulate yet)."""
    from same_numbers import skipped_scenarios

    skipped = {ROOT / p for p in skipped_scenarios()}
    files = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "validation" / "scenarios").glob("*.yaml"))
    out = []
    for path in [p for p in files if p not in skipped]:
        data = read_yaml(path, what="scenario file")
        if isinstance(data, dict) and "serving" not in data and (only is None or only in path.name):
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--only", default=None, help="only scenario files whose name contains this")
    args = parser.parse_args(argv)
    files = args.files or training_files(args.only)
    failed = skipped = taken = 0
    for path in files:
        try:
            line, ok = compare(path)
        except InputError as error:
            line, ok = f"{path.name:<60} refused: {error}", True
            skipped += 1
        else:
            taken += "played whole" not in line
        failed += not ok
        print(line, flush=True)
    print(f"{len(files)} scenarios: {taken} fast-forwarded and compared, {skipped} refused, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
