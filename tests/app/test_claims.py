"""scalesim.app.claims: the claims page's plan search and the simulations a build owns.

The search must only ever return plans that fit, the fastest of those it simulates, within the
space a claim allows; the simulations object holds every result (no module state), so two
builds agree.
"""

from pathlib import Path

import pytest

from scalesim.app.claims import SHARDING, SearchSpace, Simulations, _dominates, apply, plan_label
from scalesim.app.plans import PlanPoint
from scalesim.scenario import load_scenario

FILE = Path(__file__).resolve().parents[2] / "scenarios" / "claims" / "pcie-vs-nvlink" / "8x4090-pcie.yaml"
SPACE = SearchSpace.of({"splits": [[1, 1], [2, 1]], "micro": [8, 4], "recompute": ["none", "full"]})


@pytest.fixture(scope="module")
def base():
    scenario, _ = load_scenario(FILE)
    return scenario.with_changes(model="gpt2-350m", training={"global_batch": 64}), str(FILE)


@pytest.fixture(scope="module")
def searched(base):
    sims = Simulations()
    s, f = base
    return sims, sims.candidates(s, f, SPACE), sims.best_plan(s, f, SPACE)


def test_every_candidate_fits_and_lies_in_the_space(base, searched):
    sims, candidates, _ = searched
    s, f = base
    assert candidates
    for p in candidates:
        need, capacity = sims.memory(apply(s, p), f)
        assert need <= capacity
        assert (p.tp, p.pp) in SPACE.splits and p.micro_batch in SPACE.micro and p.recompute in SPACE.recompute
        assert (p.zero, p.offload) in SHARDING and p.dp * p.tp * p.pp == 8


def test_no_candidate_is_dominated_by_another(searched):
    _, candidates, _ = searched
    assert not [(a, b) for a in candidates for b in candidates if _dominates(a, b)]


def test_the_best_plan_is_the_fastest_candidate(base, searched):
    sims, candidates, (plan, scenario, step) = searched
    s, f = base
    assert plan in candidates and scenario == apply(s, plan)
    assert step == min(sims.step_time(apply(s, p), f) for p in candidates)


def test_a_heavier_plan_never_needs_more_memory(base, searched):
    sims, _, _ = searched
    s, f = base
    light = PlanPoint(8, 8, zero=3, micro_batch=4, recompute="full")
    heavy = PlanPoint(8, 8, zero=0, micro_batch=8, recompute="none")
    assert _dominates(heavy, light)
    assert sims.memory(apply(s, light), f)[0] <= sims.memory(apply(s, heavy), f)[0]


def test_a_fresh_simulations_object_gives_the_same_answer(base, searched):
    sims, _, best = searched
    s, f = base
    again = Simulations()
    assert again.best_plan(s, f, SPACE)[2] == best[2]
    assert again.memo.keys() <= sims.memo.keys()


def test_plan_labels():
    assert plan_label(PlanPoint(8, 8, micro_batch=8)) == "DDP, mb 8"
    assert plan_label(PlanPoint(8, 4, tp=2, zero=1, micro_batch=2, recompute="full")) == \
        "tp2, ZeRO-1, full recompute, mb 2"
    assert plan_label(PlanPoint(8, 8, zero=3, offload="optimizer", micro_batch=1)) == "ZeRO-3, offload, mb 1"
