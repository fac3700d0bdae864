"""A step's program is freed as soon as it is dropped (no reference cycles through it).

A plan search builds and drops hundreds of programs of tens of thousands of tasks; a cycle through
one keeps all its tasks alive for Python's cyclic collector, whose passes then cost more than the
build (parallel/builder.py, rank_program.py, collectives/tree.py)."""

import gc
from pathlib import Path

from scalesim.app.setup import prepare
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_a_dropped_pipeline_program_leaves_no_cycles_holding_its_tasks():
    scenario, file = load_scenario(ROOT / "scenarios" / "64xh100-llama3-70b.yaml")
    plan = scenario.with_changes(parallel={"tp": 2, "pp": 8, "dp": 4}, training={"micro_batch": 2})
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        setup = prepare(plan, file)
        tasks = sum(len(t) for t in setup.step.program.tasks.values())
        del setup
        unreachable = gc.collect()      # what only the cyclic collector could free
    finally:
        if enabled:
            gc.enable()
    assert tasks > 10_000
    assert unreachable < tasks / 10
