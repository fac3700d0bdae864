"""Plot helpers: what is drawn matches what the eye can resolve."""

import pytest

from scalesim.report.plots import _merge_spans


def test_spans_closer_than_the_gap_are_drawn_as_one_and_distant_ones_stay_apart():
    bars = [(0.0, 1.0), (1.05, 1.0), (5.0, 1.0)]
    assert _merge_spans(bars, 0.1) == [(0.0, 2.05), (5.0, 1.0)]
    assert _merge_spans(bars, 0.0) == bars


def test_host_bound_stretches_are_drawn_and_named_in_the_legend(tmp_path, monkeypatch):
    import matplotlib.axes

    from scalesim.engine import simulate
    from scalesim.program import ComputeTask, Program
    from scalesim.report.plots import timeline_plot

    labels = []
    legend = matplotlib.axes.Axes.legend
    monkeypatch.setattr(matplotlib.axes.Axes, "legend",
                        lambda self, handles, names, **kw: labels.extend(names) or legend(self, handles, names, **kw))
    kernels = lambda host_s: tuple(ComputeTask(f"k{i}", "forward", 1e-6, deps=(i - 1,) if i else (), host_s=host_s)
                                   for i in range(5))
    timeline_plot(simulate(Program({0: kernels(10e-6)}, ())), tmp_path / "bound.png", "host-bound")
    assert "waiting for host" in labels
    labels.clear()
    timeline_plot(simulate(Program({0: kernels(0.0)}, ())), tmp_path / "free.png", "no host cost")
    assert labels and "waiting for host" not in labels


def test_the_sweep_plot_keeps_plan_labels_inside_their_panel_and_days_in_plain_numbers(tmp_path, monkeypatch):
    import scalesim.report.sweep_table as sweep_table

    best = [{"gpus": g, "status": "ok", "plan": f"dp{g} zero2 mb8", "tokens_per_s_per_gpu": rate,
             "samples_per_s": 1.0, "time_to_train_s": 86400 * d, "cost_usd": 600.0 + g, "on_prem_cost_usd": 350.0}
            for g, rate, d in ((8, 14164.0, 1.02), (16, 13599.0, 0.53), (32, 12292.0, 0.29))]
    figures = []
    monkeypatch.setattr(sweep_table, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    sweep_table.best_plan_plot({"scenario": "8x H100, Llama 2 7B", "rank_by": "time", "search": True,
                                "best": best}, tmp_path / "best.png")
    fig = figures[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    throughput, days = fig.axes[0], fig.axes[1]
    title_bottom = throughput.title.get_window_extent(renderer).y0
    for label in throughput.texts:
        box = label.get_window_extent(renderer)
        assert box.y1 <= title_bottom, f"{label.get_text()} runs into the panel title"
    ticks = [t.get_text() for t in days.get_yticklabels(minor=True) + days.get_yticklabels() if t.get_text()]
    assert ticks and not any("10^" in t or "times" in t for t in ticks), ticks


def test_topology_labels_on_short_vertical_edges_read_across_above_the_circles(tmp_path, monkeypatch):
    # The memory-to-CPU edge is shorter than its label: turned along the edge, the label hid
    # under the two circles ("dr5-4800-8c").
    import scalesim.report.plots as plots
    from scalesim.topology import build_node_graph, load_node_design

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    plots.topology_plot(build_node_graph(load_node_design("dgx-h100")), tmp_path / "t.png", "dgx-h100")
    ax = figures[0].axes[0]
    circles = max(c.get_zorder() for c in ax.collections)
    memory = [t for t in ax.texts if t.get_text().startswith("ddr5")]
    assert len(memory) == 2
    assert all(t.get_rotation() == 0 and t.get_zorder() > circles for t in memory)


def test_the_scaling_plot_starts_at_zero_and_never_cuts_off_a_super_linear_point(tmp_path, monkeypatch):
    import matplotlib.axes

    from scalesim.report.plots import scaling_plot

    limits = []
    set_ylim = matplotlib.axes.Axes.set_ylim
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylim",
                        lambda self, *a, **kw: (len(a) == 2 and limits.append(a)) or set_ylim(self, *a, **kw))
    scaling_plot([{"gpus": 1, "scaling_efficiency": 1.0}, {"gpus": 8, "scaling_efficiency": 0.7}],
                 tmp_path / "usual.png", "usual")
    scaling_plot([{"gpus": 1, "scaling_efficiency": 1.0}, {"gpus": 8, "scaling_efficiency": 1.17}],
                 tmp_path / "zero.png", "ZeRO-2")
    (low, high), (low_z, high_z) = limits[-2:]
    assert low == low_z == 0 and high >= 100 and high_z > 117


def test_artists_still_take_their_properties_through_set_after_the_cheaper_matplotlib_import(tmp_path):
    # report/figures.py spares matplotlib the set() docstrings it builds on import; set() itself,
    # and what it draws, must not change.
    from scalesim.report.figures import new_figure, save_figure

    fig, ax = new_figure((3, 2))
    line, = ax.plot([0, 1], [0, 1])
    line.set(linewidth=3, color="red", label="a line")
    assert (line.get_linewidth(), line.get_color(), line.get_label()) == (3, "red", "a line")
    assert save_figure(fig, tmp_path / "line.png").stat().st_size > 0


def test_a_figure_saved_with_one_draw_is_the_picture_matplotlibs_tight_box_gives(tmp_path):
    # save_figure lays the figure out at the saved DPI and measures the legend below the axes
    # without drawing the clipped bars (report/figures.py); matplotlib's own recipe draws twice.
    from matplotlib.collections import PolyCollection

    from scalesim.report.figures import new_figure, save_figure

    def figure():
        fig, ax = new_figure((6, 2))
        ax.add_collection(PolyCollection([[(i, 0), (i, 1), (i + 0.8, 1), (i + 0.8, 0)] for i in range(50)]))
        ax.set_xlim(0, 50)
        ax.set_ylim(-1, 2)
        ax.set_yticks([0.5], ["GPU 0 (x8, identical) compute"])
        ax.legend(ax.collections, ["forward"], loc="upper center", bbox_to_anchor=(0.5, -0.3))
        return fig

    ours = save_figure(figure(), tmp_path / "ours.png", whole_legend=True)
    theirs = figure()
    theirs.tight_layout()
    theirs.savefig(tmp_path / "theirs.png", dpi=120, bbox_inches="tight", metadata={"Software": "scalesim"})
    assert ours.read_bytes() == (tmp_path / "theirs.png").read_bytes()


def test_only_the_command_shortens_matplotlibs_docstrings_a_library_user_keeps_them():
    import subprocess
    import sys

    show = "import scalesim.report.figures, matplotlib.lines as m; print(len(m.Line2D.set.__doc__ or ''))"
    as_library = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, check=True)
    as_command = subprocess.run([sys.executable, "-c", "import scalesim.cli; " + show],
                                capture_output=True, text=True, check=True)
    assert int(as_library.stdout) > 1000 > int(as_command.stdout)   # the property table, or none


def test_thousands_of_thin_bars_draw_their_pixels_once_the_picture_of_one_path_per_bar(tmp_path, monkeypatch):
    # Agg snaps each small bar to whole pixels; the timeline paints the union of those pixel spans
    # in one path (report/timeline_plot.py): the same PNG pixels as drawing every bar by itself.
    import numpy as np
    from matplotlib.collections import PolyCollection
    from PIL import Image

    import scalesim.report.timeline_plot as tp
    from scalesim.timeline import Interval, Timeline

    rng = np.random.default_rng(7)
    widths = rng.uniform(1e-6, 4e-4, 6000)
    starts = np.cumsum(widths + rng.uniform(0.0, 3e-4, 6000))
    intervals = [Interval(0, "compute", f"k{i}", "forward" if i % 3 else "backward", s, s, s + w)
                 for i, (s, w) in enumerate(zip(starts.tolist(), widths.tolist()))]
    timeline = Timeline(tuple(intervals), intervals[-1].end_s, 0.0, 0.0)
    drawn = []
    draw = tp._PixelBars.draw
    monkeypatch.setattr(tp._PixelBars, "draw", lambda self, r: draw(self, r) or drawn.append(self))
    ours = tp.timeline_plot(timeline, tmp_path / "ours.png", "thin bars")

    def one_path_per_bar(x0, x1, y0, y1, colour):
        return PolyCollection([[(a, y0), (a, y1), (b, y1), (b, y0)] for a, b in zip(x0, x1)],
                              facecolors=colour, edgecolor="white", linewidth=0.0)   # as before

    monkeypatch.setattr(tp, "_PixelBars", one_path_per_bar)
    theirs = tp.timeline_plot(timeline, tmp_path / "theirs.png", "thin bars")
    assert np.array_equal(np.asarray(Image.open(ours)), np.asarray(Image.open(theirs)))
    width_px = Image.open(ours).size[0]
    assert drawn and all(len(c.get_paths()[0].vertices) // 5 < width_px / 2 for c in drawn)


def _topology_figure(monkeypatch, tmp_path, name):
    import scalesim.report.plots as plots
    from scalesim.topology import build_node_graph, load_node_design

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    graph = build_node_graph(load_node_design(name))
    plots.topology_plot(graph, tmp_path / "t.png", name)
    return graph, figures[0].axes[0]


@pytest.mark.parametrize("name", ["rtx4090-pcie-8", "dgx-h100", "mi300x-8", "gb200-nvl72"])
def test_no_line_or_link_label_of_a_topology_drawing_runs_under_a_part_it_does_not_join(name, tmp_path, monkeypatch):
    # rtx4090-pcie-8's NIC hangs from cpu0 (`attach: host`), but its line ran straight through sw1
    # (a row between) with its label hidden under sw1's circle: the NIC looked as if under sw1.
    # A mesh's gpu0-gpu2 line ran through gpu1 the same way.
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection

    graph, ax = _topology_figure(monkeypatch, tmp_path, name)
    ax.get_xlim(), ax.get_ylim()
    to_px = ax.transData.transform
    centres = np.vstack([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
    assert len(centres) == graph.number_of_nodes()
    px = to_px(centres)
    radius = 15 * ax.figure.dpi / 72           # node_size 900 pt^2: a 30 pt circle

    segments = [s for c in ax.collections if isinstance(c, LineCollection) for s in c.get_segments()]
    segments += [np.column_stack(line.get_data()) for line in ax.lines]
    assert segments
    for seg in segments:
        a, b = to_px(np.asarray(seg, dtype=float)[[0, -1]])
        t = np.clip(((px - a) @ (b - a)) / max((b - a) @ (b - a), 1e-12), 0, 1)
        gap = np.linalg.norm(px - (a + t[:, None] * (b - a)), axis=1)
        ends = (np.linalg.norm(px - a, axis=1) < 1) | (np.linalg.norm(px - b, axis=1) < 1)
        assert (gap[~ends] > radius).all(), (name, seg)
    labels = [t for t in ax.texts if "GB/s" in t.get_text()]
    assert labels
    for text in labels:
        at = to_px(np.asarray(text.get_position(), dtype=float)[None, :])[0]
        assert (np.linalg.norm(px - at, axis=1) > radius).all(), (name, text.get_text())


def test_a_nic_attached_to_the_host_is_drawn_from_its_cpu_beside_the_switches(tmp_path, monkeypatch):
    from scalesim.report.plots import _ordered_layout
    from scalesim.topology import build_node_graph, load_node_design

    graph = build_node_graph(load_node_design("rtx4090-pcie-8"))
    assert set(graph["nic0"]) == {"cpu0"}
    pos, rows = _ordered_layout(graph)
    assert pos["nic0"][1] == pos["sw1"][1] == pos["cpu0"][1] - 1


def test_the_topology_drawing_says_its_bandwidths_are_per_direction_as_the_table_prints_them(tmp_path, monkeypatch):
    # PCIe 4.0 x16 read "32 GB/s" on the drawing, 31.5 in the table beside it, and nothing said per direction
    import scalesim.report.plots as plots
    from scalesim.topology import build_node_graph, load_node_design

    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    plots.topology_plot(build_node_graph(load_node_design("rtx4090-pcie-8")), tmp_path / "t.png", "rtx4090-pcie-8")
    ax = figures[0].axes[0]
    assert "per direction" in ax.get_title()
    labels = [t.get_text() for t in ax.texts]
    assert "pcie-gen4\n31.5 GB/s" in labels and "infinity-fabric\n144 GB/s" in labels, labels


def test_the_scaling_plot_draws_points_that_would_not_fit_hollow_and_says_why_at_one_gpu(tmp_path, monkeypatch):
    # ux15b: a ZeRO-3 curve measured against a 1-GPU run that could not exist says so by its point
    import matplotlib.axes

    from scalesim.report.plots import scaling_plot

    notes = []
    annotate = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate",
                        lambda self, text, *a, **kw: notes.append(text) or annotate(self, text, *a, **kw))
    hollow = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **kw: (
        kw.get("color") == "white" and hollow.append(list(a[0]))) or plot(self, *a, **kw))
    scaling_plot([{"gpus": 1, "scaling_efficiency": 1.0, "fits": False},
                  {"gpus": 2, "scaling_efficiency": 0.53, "fits": False},
                  {"gpus": 8, "scaling_efficiency": 0.32, "fits": True}], tmp_path / "z3.png", "ZeRO-3",
                 "against a 1-GPU run that would not fit: 108.3 GiB of 24.0 GiB")
    assert hollow == [[1, 2]] and notes == ["against a 1-GPU run that would not fit: 108.3 GiB of 24.0 GiB"]
    scaling_plot([{"gpus": 1, "scaling_efficiency": 1.0, "fits": True},
                  {"gpus": 8, "scaling_efficiency": 0.7, "fits": True}], tmp_path / "ddp.png", "DDP")
    assert hollow == [[1, 2]] and len(notes) == 1
