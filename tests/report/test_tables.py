"""The result table explains a scaling efficiency above 100% where it prints it."""

from types import SimpleNamespace

from scalesim.report.tables import _above_linear_note


def result(efficiency, zero):
    return SimpleNamespace(scaling_efficiency=efficiency, plan={"dp": 8, "zero": zero})


def test_above_linear_scaling_under_zero_names_the_sharded_optimizer_update():
    assert "ZeRO" in _above_linear_note(result(1.014, zero=1))


def test_above_linear_scaling_without_zero_still_says_why():
    assert "above 100%" in _above_linear_note(result(1.01, zero=0))


def test_linear_or_worse_scaling_and_no_baseline_need_no_note():
    assert _above_linear_note(result(1.0, zero=1)) == ""
    assert _above_linear_note(result(0.72, zero=3)) == ""
    assert _above_linear_note(result(None, zero=1)) == ""


def test_the_memory_parts_are_named_in_words_and_empty_ones_left_out():
    # "grad_buckets 0 B" on every ZeRO run and an "overhead" no row explained
    from scalesim.report.tables import memory_parts

    text = memory_parts({"weights": 2.0 ** 30, "gradients": 2.0 ** 30, "optimizer": 2.0 ** 31, "grad_buckets": 0.0,
                         "activations": 2.0 ** 32, "overhead": 2.0 ** 30})
    assert "grad_buckets" not in text and "0 B" not in text
    assert "overhead (CUDA context" in text and "fragmentation" in text
    assert "gradient buckets 1.0 GiB" in memory_parts({"grad_buckets": 2.0 ** 30})
