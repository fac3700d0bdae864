"""collective's busbw plot: bandwidth from zero (a single curve's climb from 7.7 to 12.3 GB/s filled the
axis like a tenfold one) and message sizes as 64 KiB, 1 MiB, 1 GiB (not 2^16, 2^20, 2^30 bytes)."""

from types import SimpleNamespace

import scalesim.report.collective as collective


def test_bandwidth_starts_at_zero_and_sizes_read_in_binary_units(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(collective, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    rows = [SimpleNamespace(topology="rtx4090-pcie-8", algo="ring", op="all_reduce", gpus=8, bytes=2.0 ** k,
                            busbw_GBps=12.3 - 4.6 * 0.6 ** (k - 20)) for k in range(20, 31)]
    collective.collective_plot(rows, tmp_path / "c.png")
    ax = figures[0].axes[0]
    assert ax.get_ylim()[0] == 0
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "1 MiB" in labels and "1 GiB" in labels and not any("^" in t for t in labels), labels
