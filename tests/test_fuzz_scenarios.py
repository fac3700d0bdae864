"""Mutated shipped scenarios: exit 0, 2 (with a message) or 3, never a traceback, always quick.

A quick, seeded version of benchmarks/fuzz_scenarios.py (run that by hand for
thousands of cases, each in its own process).
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from fuzz_scenarios import cases, run_in_process  # noqa: E402

COUNT = int(os.environ.get("SCALESIM_FUZZ_COUNT", 250))
CPU_BOUND_S = 10.0


def test_mutated_scenarios_never_trace_back_and_answer_quickly(tmp_path):
    problems, exits = [], set()
    for case, raw in cases(COUNT, seed=20261203, quick=True):
        outcome = run_in_process(case, raw, tmp_path)
        exits.add(outcome.exit_code)
        problem = outcome.problem(CPU_BOUND_S)
        if problem:
            problems.append(f"{problem}: {case}\n{outcome.output[-800:]}")
    assert not problems, "\n\n".join(problems)
    assert {0, 2} <= exits          # the mutations reach both refusals and simulations
