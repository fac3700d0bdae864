"""The engine keys what it derives from flows (link masks, memoised max-min rates) on the
identity of plan and flow objects, which the builder shares between recurring calls. Sharing
must be an optimisation only: a step whose every call carries its own copy of its plan plays
out to exactly the same timeline."""

from dataclasses import replace
from pathlib import Path

import pytest

from scalesim.collectives.plan import CollectivePlan
from scalesim.engine import simulate
from scalesim.parallel import build_program
from scalesim.program import CollectiveTask, Program
from scalesim.app.setup import prepare
from scalesim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _copy(plan: CollectivePlan) -> CollectivePlan:
    """An equal plan sharing no object with this one: new phases, flows and link tuples."""
    return replace(plan, phases=tuple(replace(phase, flows=tuple(replace(f, links=tuple(list(f.links)))
                                                                 for f in phase.flows))
                                      for phase in plan.phases))


def _unshared(program: Program) -> Program:
    """The same step with a private copy of the plan in every call."""
    return replace(program, tasks={rank: tuple(replace(t, plan=_copy(t.plan)) if isinstance(t, CollectiveTask)
                                               else t for t in tasks)
                                   for rank, tasks in program.tasks.items()})


def _program(name: str, symmetric: bool) -> Program:
    scenario, file = load_scenario(SCENARIOS / name)
    setup = prepare(scenario, file)
    return build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric)


@pytest.mark.parametrize("name, symmetric", [("8x4090-ddp.yaml", False), ("32x4090-4nodes-100gbe.yaml", True)])
def test_shared_plans_and_private_copies_give_the_same_timeline(name, symmetric):
    program = _program(name, symmetric)
    shared, copied = simulate(program), simulate(_unshared(program))
    assert copied.intervals == shared.intervals          # every task, to the last bit
    assert (copied.end_s, copied.bytes_sent, copied.bytes_delivered) == (
        shared.end_s, shared.bytes_sent, shared.bytes_delivered)
    assert copied.compute_slowdown_s == shared.compute_slowdown_s


def test_repeated_runs_of_one_program_are_identical():
    # Nothing the engine derives is kept between runs (no process-wide caches).
    program = _program("8x4090-ddp.yaml", False)
    assert simulate(program).intervals == simulate(program).intervals
