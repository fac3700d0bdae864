"""The search's step-time bound is a true lower bound: no simulated step is ever shorter."""

import pytest

from scalesim.app.setup import prepare, simulate_setup
from scalesim.scenario import load_scenario
from scalesim.parallel.bounds import beaten, compiled_bound_s, fastest

CASES = [
    ("scenarios/8x4090-ddp.yaml", {}),
    ("scenarios/32x4090-4nodes-100gbe.yaml", {}),
    # a 1F1B pipeline (the chained bound) with ZeRO-3 and full recompute, and the interleaved one
    ("scenarios/64xh100-llama3-70b.yaml", {"parallel": {"pp_schedule": "1f1b", "virtual_stages": 1, "zero": 3},
                                           "training": {"global_batch": 8, "activation_checkpointing": "full"}}),
    ("scenarios/64xh100-llama3-70b.yaml", {"training": {"global_batch": 16}}),
    # tensor parallelism without sequence parallelism: the blocking all-reduces count
    ("scenarios/64xh100-llama3-70b.yaml", {"parallel": {"pp_schedule": "1f1b", "virtual_stages": 1,
                                                        "sequence_parallel": False},
                                           "training": {"global_batch": 8, "activation_checkpointing": "full"}}),
    # partial recompute (Megatron's block method): only the recomputed blocks' recompute and TP calls count
    ("scenarios/64xh100-llama3-70b.yaml", {"parallel": {"pp_schedule": "1f1b", "virtual_stages": 1},
                                           "training": {"global_batch": 8, "activation_checkpointing": "full",
                                                        "recompute_num_layers": 3}}),
]


@pytest.mark.parametrize("path,changes", CASES)
def test_no_simulated_step_beats_the_bound(path, changes):
    scenario, file = load_scenario(path)
    setup = prepare(scenario.with_changes(**changes) if changes else scenario, file)
    bound = compiled_bound_s(setup.step)
    assert 0 < bound <= simulate_setup(setup).end_s


def test_a_plan_is_skipped_only_when_its_bound_exceeds_the_best_step():
    assert not beaten(1.0, None)
    assert not beaten(1.0, 1.0)            # a tie may still be best
    assert beaten(1.1, 1.0)


def test_the_fastest_few_are_those_simulating_every_plan_finds():
    scenario, file = load_scenario("scenarios/8xa100-ddp.yaml")
    variants = [{"parallel": {"zero": z}, "training": {"activation_checkpointing": r}}
                for z in (0, 1, 3) for r in ("none", "full")]
    setups = [prepare(scenario.with_changes(**v), file) for v in variants]
    simulated = []

    def step_s(setup):
        simulated.append(setup)
        return simulate_setup(setup).end_s
    everything = sorted((simulate_setup(s).end_s, i) for i, s in enumerate(setups))[:2]
    assert fastest(setups, step_s, 2) == [(i, step) for step, i in everything]
    # full recompute adds a third to the compute: its bound exceeds the two fastest without it
    assert len(simulated) < len(setups)
