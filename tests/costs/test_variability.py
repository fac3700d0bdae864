"""A synchronous job runs at its slowest GPU's pace: order statistics of per-GPU speed."""

import math

import pytest

from scalesim.costs.variability import expected_max_standard_normal, slowest_gpu_factor


def test_one_gpu_is_a_median_draw_and_no_spread_means_no_slowdown():
    assert slowest_gpu_factor(1) == 1.0
    assert slowest_gpu_factor(4096, spread=0.0) == 1.0


def test_the_expected_maximum_matches_the_closed_forms_for_two_and_three_draws():
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_standard_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)


def test_more_gpus_and_more_spread_are_never_faster():
    counts = [1, 2, 8, 64, 1024, 16384]
    factors = [slowest_gpu_factor(n) for n in counts]
    assert factors == sorted(factors) and len(set(factors)) == len(factors)
    assert slowest_gpu_factor(64, 0.03) > slowest_gpu_factor(64, 0.015)
    # the slowest of 16k GPUs is ~4 standard deviations out, not unbounded
    assert 3.5 < expected_max_standard_normal(16384) < 4.5


def test_negative_spread_is_refused():
    with pytest.raises(ValueError):
        slowest_gpu_factor(8, -0.01)
