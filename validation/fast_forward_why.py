"""Why a step is or is not fast-forwarded: each condition of engine/periods.py and fast_forward.py in turn.

Run: python validation/fast_forward_why.py [--play] [--gpus N ...] FILES...
For each scenario's step (and, with --gpus, its scaling-curve points on N GPUs) one line per condition:
  tasks      the step's tasks against MIN_TASKS (fewer are played whole)
  may_repeat the largest rank's best repeating window (period x copies) and the tasks a cut keeping
             KEEP_BEFORE + KEEP_AFTER periods would skip there, against MIN_SKIPPED of its tasks
  windows    every rank's window (find_windows): the fewest copies, the periods' sum
  plan_cut   periods kept before the cut (KEEP_BEFORE, or half the ranks), periods removed, the
             fraction of the step skipped against MIN_SKIPPED, and the most any cut could skip
             (one period kept on each side): a step with few periods (an interleaved schedule's
             rounds) cannot reach MIN_SKIPPED whatever is kept
  check      (--play, when a cut is planned or forced with MIN_SKIPPED lowered to 0) the shortened
             program built or not, and how far the period after the cut is from an exact shift of
             the one before it (the spread of the shifts against the tolerance): warm-up not over
A diagnostic only: nothing here changes what `simulate` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from scalesim.app.run import scaling_point  # noqa: E402
from scalesim.app.setup import prepare  # noqa: E402
from scalesim.engine import fast_forward as ff  # noqa: E402
from scalesim.engine import periods  # noqa: E402
from scalesim.engine.simulator import played  # noqa: E402
from scalesim.errors import InputError  # noqa: E402
from scalesim.scenario import load_scenario  # noqa: E402


def reasons(program, play: bool) -> list[str]:
    total = sum(len(t) for t in program.tasks.values())
    out = [f"tasks      {total:,} on {len(program.tasks)} simulated ranks (MIN_TASKS {ff.MIN_TASKS:,}): "
           + ("enough" if total >= ff.MIN_TASKS else "too few, played whole")]
    seen: dict = {}
    repeats = periods.may_repeat(program, seen)
    (rank, (_sig, best)), = seen.items()
    n = len(program.tasks[rank])
    kept = periods.KEEP_BEFORE + periods.KEEP_AFTER
    skippable = (best.copies - kept) * best.period if best is not None else 0
    out.append(f"may_repeat rank {rank}: {n:,} tasks, window {best.period} x {best.copies} from task "
               f"{best.start}; skippable keeping {kept} periods {skippable:,} "
               f"({skippable / n:.1%}, need {periods.MIN_SKIPPED:.0%}): {repeats}" if best is not None
               else f"may_repeat rank {rank}: no repeating window: False")
    windows = periods.find_windows(program, seen)
    if windows is None:
        out.append("windows    none (a rank without a window, or ranks' periods that cover different work)")
        return out
    fewest = min(w.copies for w in windows.values())
    period_sum = sum(w.period for w in windows.values())
    out.append(f"windows    fewest copies {fewest}, periods' sum {period_sum:,} tasks "
               f"({', '.join(f'{r}: {w.period}x{w.copies}' for r, w in list(windows.items())[:6])}"
               f"{', ...' if len(windows) > 6 else ''})")
    before = max(periods.KEEP_BEFORE, (len(windows) + 1) // 2)
    removed = fewest - before - periods.KEEP_AFTER
    most = (fewest - 2) * period_sum / total
    cut = periods.plan_cut(windows, total)
    out.append(f"plan_cut   keep {before} before and {periods.KEEP_AFTER} after: remove {removed} periods = "
               f"{max(removed, 0) * period_sum / total:.1%} of the step (need {periods.MIN_SKIPPED:.0%}; "
               f"at most {most:.1%} keeping one period on each side): {'cut' if cut else 'no cut'}")
    if play:
        out.append(_check(program, windows, total, cut))
    return out


def _check(program, windows, total: int, cut) -> str:
    """The first shortened play and the spread of the shifts across the cut (what `_across_cut` tests)."""
    forced = cut is None
    if forced:
        saved, periods.MIN_SKIPPED = periods.MIN_SKIPPED, 0.0
        try:
            cut = periods.plan_cut(windows, total)
        finally:
            periods.MIN_SKIPPED = saved
    if cut is None:
        return "check      no cut possible (fewer than 2 periods to remove)"
    short = periods.shortened(program, cut, cut.removed)
    if short is None:
        return "check      no shortened program (a dependency or call does not survive the cut)"
    start = time.perf_counter()
    times = ff._times(played(short), short)
    seconds = time.perf_counter() - start
    end = max(float(t[2].max()) for t in times.values() if t.shape[1])
    shifts = np.concatenate([(t[:, cut.at(r):cut.at(r) + w.period] - t[:, cut.at(r) - w.period:cut.at(r)]).ravel()
                             for r, t in times.items() for w in (cut.windows[r],)])
    spread, tolerance = float(shifts.max() - shifts.min()), ff.TOLERANCE * end
    return (f"check      {'(forced) ' if forced else ''}cut before copy {cut.before}, {cut.removed} removed: "
            f"shortened play {seconds:.2f} s, shifts across the cut spread {spread:.1e} s "
            f"(tolerance {tolerance:.1e} s): {'periodic' if spread <= tolerance else 'not periodic yet'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--play", action="store_true", help="play the first shortened step and check the cut")
    parser.add_argument("--gpus", type=int, action="append", default=[], help="a scaling-curve point to look at too")
    args = parser.parse_args(argv)
    for path in args.files:
        scenario, file = load_scenario(path)
        setup = prepare(scenario, file)
        for gpus in [None, *args.gpus]:
            try:
                point = setup if gpus is None else scaling_point(setup, gpus)
            except InputError as error:
                point = error
            label = "step" if gpus is None else f"{gpus}-GPU point"
            if isinstance(point, InputError) or point is None:
                print(f"== {path.name} {label}: no such point{f' ({point})' if point is not None else ''}")
                continue
            print(f"== {path.name} {label}")
            print("\n".join(reasons(point.step.program, args.play)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
