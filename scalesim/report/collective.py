"""nccl-tests-style table and bus-bandwidth plot for `scalesim collective`."""

from __future__ import annotations

from pathlib import Path

from scalesim.report import figures  # noqa: F401 (first: it makes matplotlib's import cheaper)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from rich.table import Table  # noqa: E402

from scalesim.report.figures import save_figure  # noqa: E402
from scalesim.units import format_bytes  # noqa: E402


def collective_table(rows) -> Table:
    t = Table(title="simulated collective (nccl-tests definitions; GB/s = 1e9 B/s)", title_justify="left")
    for col in ("topology", "op", "algo", "GPUs", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        t.add_column(col, justify="right" if col not in ("topology", "op", "algo") else "left")
    for r in rows:
        t.add_row(r.topology, r.op, r.algo, str(r.gpus), format_bytes(r.bytes), f"{r.time_s * 1e6:,.1f}",
                  f"{r.algbw_GBps:,.2f}", f"{r.busbw_GBps:,.2f}")
    return t


def collective_plot(rows, path: Path) -> Path:
    """Bus bandwidth against message size, one curve per topology and algorithm."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves: dict[tuple, list] = {}
    for r in rows:
        curves.setdefault((r.topology, r.algo, r.op, r.gpus), []).append(r)
    for (topology, algo, op, gpus), points in curves.items():
        ax.plot([p.bytes for p in points], [p.busbw_GBps for p in points], marker="o", markersize=3,
                label=f"{topology} {op} {algo} ({gpus} GPUs)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_bytes(x).replace(".0 ", " ")))  # 1 MiB
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)             # from zero: a climb from 7.7 to 12.3 GB/s is not a tenfold one
    ax.set_title("simulated collective bus bandwidth")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
