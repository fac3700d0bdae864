"""Parity plot labels: every case named, no two names on top of each other."""

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text as mtext  # noqa: E402

from scalesim.report.validation import _label_points  # noqa: E402


def _text_boxes(fig, ax):
    fig.canvas.draw()                       # places the texts where the plot will show them
    renderer = fig.canvas.get_renderer()
    return [mtext.Text.get_window_extent(t, renderer) for t in ax.texts]


def test_a_tight_cluster_of_cases_gets_labels_that_do_not_overlap():
    # Twelve cases within 5% of each other, like SC21's GPT sizes, plus two far away.
    points = [(f"megatron-sc21-gpt-{i}B", 130 + 3 * i, 125 + 3.5 * i) for i in range(12)]
    points += [("nccl-h100x8-allreduce-nvls", 480, 476), ("p2p-4090x2-patched-memcpy", 24, 25)]
    fig, ax = plt.subplots(figsize=(9, 9))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(10, 1000)
    ax.set_ylim(10, 1000)
    ax.scatter([x for _, x, _ in points], [y for _, _, y in points])
    _label_points(fig, ax, points)

    assert sorted(t.get_text() for t in ax.texts) == sorted(name for name, _, _ in points)
    boxes = _text_boxes(fig, ax)
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), "two case labels overlap"
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    plt.close(fig)
