"""Plot helpers: what is drawn matches what the eye can resolve."""

from scalesim.report.plots import _merge_spans


def test_spans_closer_than_the_gap_are_drawn_as_one_and_distant_ones_stay_apart():
    bars = [(0.0, 1.0), (1.05, 1.0), (5.0, 1.0)]
    assert _merge_spans(bars, 0.1) == [(0.0, 2.05), (5.0, 1.0)]
    assert _merge_spans(bars, 0.0) == bars
