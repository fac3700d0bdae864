"""A one-row timeline (one GPU, one stream) lays out without matplotlib's 'Tight layout not applied'
warning on the user's terminal, its legend just under the axis label rather than an inch below."""

import warnings

from PIL import Image

from scalesim.engine import simulate
from scalesim.program import ComputeTask, Program
from scalesim.report.plots import timeline_plot


def test_a_one_row_timeline_saves_without_a_layout_warning_and_without_a_gap(tmp_path):
    kernels = tuple(ComputeTask(f"k{i}", "forward", 1e-3, deps=(i - 1,) if i else ()) for i in range(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = timeline_plot(simulate(Program({0: kernels}, ())), tmp_path / "one.png", "one GPU")
    width, height = Image.open(path).size
    assert height < 0.25 * width          # title, one row, the axis and the legend: no empty band
