"""Failures, checkpoints and goodput: formulas and the physics they describe."""

import math

import numpy as np
import pytest

from scalesim.costs import reliability as rel


def test_young_daly_interval_is_its_formula():
    for delta, mtbf in ((10.0, 3600.0), (120.0, 86400.0), (0.5, 1e7)):
        assert rel.young_daly_interval_s(delta, mtbf) == pytest.approx(math.sqrt(2 * delta * mtbf))


def test_young_daly_interval_is_near_the_optimum_of_the_goodput():
    delta, restart, mtbf = 60.0, 600.0, 8 * 3600.0
    best = rel.young_daly_interval_s(delta, mtbf)
    at_best = rel.goodput(best, delta, restart, mtbf)
    for factor in (0.25, 0.5, 2.0, 4.0):
        assert rel.goodput(best * factor, delta, restart, mtbf) < at_best


def test_goodput_falls_as_the_cluster_grows_at_a_fixed_failure_rate():
    rate = rel.FAILURE_RATE_ECC_PER_GPU_HOUR
    goodputs = []
    for gpus in (8, 64, 512, 4096, 32768):
        r = rel.run_reliability(useful_s=30 * 86400.0, gpus=gpus, failure_rate_per_gpu_hour=rate,
                                checkpoint_s=60.0, restart_s=900.0)
        goodputs.append(r.goodput)
        assert r.wall_s == pytest.approx(r.useful_s / r.goodput)
    assert all(a > b for a, b in zip(goodputs, goodputs[1:]))
    assert 0 < goodputs[-1] < goodputs[0] < 1


def test_expected_interruptions_follow_the_failure_rate():
    r = rel.run_reliability(useful_s=10 * 86400.0, gpus=1000, failure_rate_per_gpu_hour=1e-5,
                            checkpoint_s=30.0, restart_s=600.0)
    # Failures arrive at gpus x rate per hour of wall time.
    assert r.interruptions == pytest.approx(1000 * 1e-5 * r.wall_s / 3600.0)
    assert r.mtbf_s == pytest.approx(3600.0 / (1000 * 1e-5))
    lost = r.lost_s
    assert sum(lost.values()) == pytest.approx(r.wall_s - r.useful_s)
    assert all(v >= 0 for v in lost.values())


def test_without_failures_only_the_checkpoint_writes_are_lost():
    r = rel.run_reliability(useful_s=3600.0, gpus=8, failure_rate_per_gpu_hour=0.0, checkpoint_s=10.0,
                            restart_s=600.0)
    assert r.interruptions == 0
    assert r.wall_s == pytest.approx(3600.0 + 10.0)      # one checkpoint, at the end


def test_daly_wall_time_matches_an_event_by_event_simulation():
    """Exponential failures, checkpoint every tau, restart R (which can itself fail)."""
    rng = np.random.default_rng(1)
    mtbf, delta, restart = 10.0, 1.0, 2.0
    tau = rel.young_daly_interval_s(delta, mtbf)
    segments = 20
    walls = []
    for _ in range(3000):
        t = 0.0
        for _ in range(segments):
            while True:
                failure = rng.exponential(mtbf)
                if failure >= tau + delta:
                    t += tau + delta
                    break
                t += failure
                while True:                      # restart until one completes
                    failure = rng.exponential(mtbf)
                    if failure >= restart:
                        t += restart
                        break
                    t += failure
        walls.append(t)
    expected = segments * tau / rel.goodput(tau, delta, restart, mtbf)
    assert np.mean(walls) == pytest.approx(expected, rel=0.03)


def test_checkpoint_holds_weights_and_optimizer_state_but_no_gradients():
    # Mixed-precision Adam: 2 (bf16 weights) + 12 (fp32 master, m, v) bytes per parameter.
    assert rel.checkpoint_bytes(1e9, "bf16", "adamw") == pytest.approx(14e9)
    # fp32 Adam: weights, m, v.
    assert rel.checkpoint_bytes(1e9, "fp32", "adam") == pytest.approx(12e9)
    assert rel.checkpoint_write_s(14e9, 2e9) == pytest.approx(7.0)


def test_non_ecc_cards_default_to_a_higher_failure_rate_with_a_stated_source():
    ecc, ecc_source = rel.default_failure_rate_per_gpu_hour(True)
    plain, plain_source = rel.default_failure_rate_per_gpu_hour(False)
    unknown, _ = rel.default_failure_rate_per_gpu_hour(None)
    assert plain > ecc and unknown == plain
    assert "Llama 3" in ecc_source and "assumption" in plain_source
    # The Llama 3 figure: 419 interruptions in 54 days on 16,384 GPUs.
    assert ecc * 16384 * 54 * 24 == pytest.approx(419)
