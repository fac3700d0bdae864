"""The claims page's plots (docs/claims.md): one figure per claim, from plain numbers.

Byte-for-byte repeatable: each figure is drawn under the same style (`STYLE`, applied for the
figure only) and written without matplotlib's Software tag. Colours are the comparison plots'
palette.
"""

from __future__ import annotations

import math
from pathlib import Path

from scalesim.report import figures  # first: it makes matplotlib's import cheaper

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from scalesim.report.comparison import PALETTE  # noqa: E402

GiB = 2.0**30
STYLE = {"svg.hashsalt": "scalesim-claims", "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3,
         "font.size": 9}
COLOURS = PALETTE[:8]


def save(fig, path: Path) -> Path:
    """Write a figure so that the same figure gives the same bytes: no Software/Date tags."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".svg":
        fig.savefig(path, metadata={"Date": None, "Creator": None})
    else:
        fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def params_axis(ax, xs: list[float]) -> None:
    """Log x axis of parameter counts, labelled 0.5B, 1B, 2B ... within the data's range."""
    ax.set_xscale("log")
    ticks = [m * 10.0**e for e in range(7, 13) for m in (1, 2, 5)]
    lo, hi = min(xs) / 1.15, max(xs) * 1.15
    shown = [t for t in ticks if lo <= t <= hi]
    ax.set_xticks(shown, [f"{t / 1e9:g}B" for t in shown])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_xlabel("parameters")


def _lines(ax, xs, series: dict[str, list], **style) -> None:
    for i, (label, ys) in enumerate(series.items()):
        ax.plot(xs, ys, marker="o", color=COLOURS[i], label=label, **style)


def pcie_vs_nvlink_plot(path: Path, sizes: list[float], gain: dict[int, list[float]],
                        efficiency: dict[str, list[float]], ref_batch: int) -> Path:
    """NVLink's gain by model and batch (`gain`: batch -> per model); scaling efficiency by design."""
    with plt.rc_context(STYLE):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        _lines(ax1, sizes, {f"{b} x 1,024 tokens per step": [100 * v for v in g] for b, g in gain.items()})
        ax1.axhline(10, color="grey", linestyle=":", linewidth=1)
        params_axis(ax1, sizes)
        ax1.set_ylabel("throughput gain of NVSwitch over PCIe (%)")
        ax1.set_title("NVLink's advantage, same A100s, same plan")
        ax1.legend(fontsize=8)
        _lines(ax2, sizes, {name: [100 * v for v in e] for name, e in efficiency.items()})
        params_axis(ax2, sizes)
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("scaling efficiency, 8 GPUs vs 1 (%)")
        ax2.set_title(f"8-GPU scaling at {ref_batch} x 1,024 tokens per step")
        ax2.legend(fontsize=8)
        fig.tight_layout()
        return save(fig, path)


def fit_plot(path: Path, xs: list[float], need: dict[str, list[float | None]], capacity: float,
             claimed: float) -> Path:
    """Memory per GPU (bytes, None: refused) against model size for each technique."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8, 4.6))
        _lines(ax, xs, {k: [None if n is None else n / GiB for n in v] for k, v in need.items()}, markersize=3)
        ax.axhline(capacity / GiB, color="black", linewidth=1)
        ax.text(xs[0], capacity / GiB * 1.08, f"{capacity / GiB:.0f} GiB (RTX 4090)", fontsize=8)
        ax.axvline(claimed, color="grey", linestyle="--", linewidth=1)
        ax.text(claimed * 1.05, 1.0, f"claimed limit {claimed / 1e9:.0f}B", fontsize=8, color="grey", rotation=90,
                transform=ax.get_xaxis_transform(), va="top")
        params_axis(ax, xs)
        ax.set_yscale("log")
        figures.plain_log_axis(ax.yaxis, [n / GiB for v in need.values() for n in v if n is not None])
        ax.set_ylabel("memory per GPU (GiB)")
        ax.set_title("Full fine-tuning with AdamW, 2,048-token sequences, micro-batch 1")
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        return save(fig, path)


def techniques_plot(path: Path, panels: list[tuple[str, list[str], dict[str, list[tuple[bool, float]]]]]) -> Path:
    """Per panel (title, technique labels, design -> (fits, step-time overhead) per label): bars."""
    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.8 * rows), squeeze=False)
        for ax, (title, labels, designs) in zip(axes.flat, panels):
            ys = range(len(labels))
            for k, (dname, cells) in enumerate(designs.items()):
                vals = [100 * over for _, over in cells]
                bars = ax.barh([y + (k - 0.5) * 0.4 for y in ys], vals, height=0.4, color=COLOURS[k], label=dname)
                for bar, (fits, _) in zip(bars, cells):
                    if not fits:
                        bar.set_hatch("///")
                        bar.set_alpha(0.45)
                for bar, v in zip(bars, vals):
                    ax.text(max(v, 0) + 3, bar.get_y() + bar.get_height() / 2, f"{v:+.0f}%", va="center",
                            fontsize=6)
            ax.set_yticks(list(ys), labels, fontsize=8)
            ax.invert_yaxis()
            ax.axvline(0, color="black", linewidth=0.8)
            ax.set_xlim(right=ax.get_xlim()[1] * 1.12)
            ax.set_xlabel("step time over plain data parallelism (%); hatched: does not fit")
            ax.set_title(title)
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
        fig.tight_layout()
        return save(fig, path)


def size_plot(path: Path, xs: list[float], panels: list[tuple[dict[str, list], str, str, int | None]]) -> Path:
    """Panels of (series by server, y label, title, index after which the 4090 is no longer cheapest)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(14, 4.3))
        for ax, (series, ylabel, title, j) in zip(axes, panels):
            _lines(ax, xs, series)
            params_axis(ax, xs)
            ax.set_yscale("log")
            figures.plain_log_axis(ax.yaxis, [y for ys in series.values() for y in ys if y is not None])
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=8)
            ax.set_title(title)
            if j is not None and 0 < j < len(xs):
                ax.axvspan(xs[j - 1], xs[j], color=COLOURS[0], alpha=0.12)
                ax.text(math.sqrt(xs[j - 1] * xs[j]), 0.02, "8x 4090 no longer\ncheapest", ha="center", fontsize=7,
                        transform=ax.get_xaxis_transform())
        fig.tight_layout()
        return save(fig, path)


def bandwidth_memory_plot(path: Path, micro: list[int], gains: dict[str, list[tuple[float | None, float | None]]]
                          ) -> Path:
    """Per model, (bandwidth gain, memory gain) at each micro-batch (None: nothing fits the H100)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(gains), figsize=(5.5 * len(gains), 4.2), squeeze=False)
        for ax, (m, pairs) in zip(axes[0], gains.items()):
            x = range(len(micro))
            ax.bar([i - 0.2 for i in x], [0 if bw is None else 100 * bw for bw, _ in pairs], width=0.4,
                   color=COLOURS[0], label="bandwidth: same plan, H100 -> H200")
            ax.bar([i + 0.2 for i in x], [0 if mem is None else 100 * mem for _, mem in pairs], width=0.4,
                   color=COLOURS[1], label="memory: the plan only the H200 fits")
            for i, (bw, _) in enumerate(pairs):
                if bw is None:
                    ax.text(i, 1, "H100:\nno fit", ha="center", fontsize=7)
            ax.set_xticks(list(x), [str(mb) for mb in micro])
            ax.set_xlabel("micro-batch (sequences of 4,096 tokens per GPU)")
            ax.set_ylabel("throughput gain (%)")
            ax.set_title(f"{m}, 8 GPUs, 128 sequences per step")
            ax.legend(fontsize=8)
        fig.tight_layout()
        return save(fig, path)


def _ratio_panel(ax, xs: list[float], level: float, text: str, text_below: float, ylim: tuple[float, float],
                 ylabel: str, title: str) -> None:
    """Finish a ratio-over-model-size panel: the level it is read against (a dotted line, labelled
    `text_below` under it), the parameter axis, limits, labels and legend."""
    ax.axhline(level, color="grey", linestyle=":", linewidth=1)
    ax.text(xs[0], level - text_below, text, fontsize=8, color="grey")
    params_axis(ax, xs)
    ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def fp8_plot(path: Path, xs: list[float], speed: dict[str, list], peak_ratio: float, versus: dict[str, list],
             claimed: float) -> Path:
    """FP8 / bf16 throughput per server; H100 against A100 (`versus`: label -> ratios)."""
    with plt.rc_context(STYLE):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        _lines(ax1, xs, speed)
        _ratio_panel(ax1, xs, peak_ratio, f"FP8/bf16 peak ratio ({peak_ratio:.0f}x)", 0.07,
                     (0.8, peak_ratio + 0.1), "training throughput, FP8 / bf16", "What FP8 buys, same plan, 8 GPUs")
        for colour, (label, ys) in zip((COLOURS[0], COLOURS[2]), versus.items()):
            ax2.plot(xs, ys, marker="o", color=colour, label=label)
        _ratio_panel(ax2, xs, claimed, f"claimed {claimed:g}x", 0.3, (0, claimed + 0.5), "throughput ratio",
                     "H100 against A100")
        fig.tight_layout()
        return save(fig, path)


def cost_plot(path: Path, bought: dict[str, tuple[float, float]], rented: dict[str, float],
              claimed: dict[str, tuple[float, float]]) -> Path:
    """GFLOP/s per purchase dollar (GPU -> (peak, simulated)) and M tokens per rented dollar."""
    with plt.rc_context(STYLE):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        have = list(bought)
        ax1.barh(have, [bought[g][0] for g in have], color=COLOURS[7], label="datasheet peak")
        ax1.barh(have, [bought[g][1] for g in have], color=COLOURS[0], label="simulated, training")
        for colour, (label, (lo, hi)) in zip((COLOURS[1], COLOURS[2]), claimed.items()):
            ax1.axvspan(lo, hi, color=colour, alpha=0.15, label=label, zorder=0)
        ax1.invert_yaxis()
        ax1.set_xlabel("bf16 GFLOP/s per purchase dollar")
        ax1.set_title("Per dollar of purchase (list price)")
        ax1.legend(fontsize=7)
        ax2.barh(list(rented), list(rented.values()), color=COLOURS[0])
        ax2.invert_yaxis()
        ax2.set_xlabel("million tokens trained per rented dollar")
        ax2.set_title("Per dollar of rent (catalog GPU-hour)")
        fig.tight_layout()
        return save(fig, path)


def scaling_panels_plot(path: Path, counts: list[int], panels: dict[str, dict[str, dict[int, float]]],
                        dashed: set[str], ylabel: str) -> Path:
    """Scaling efficiency against GPU count: a panel per design, a line per model (dashed: `dashed`)."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.2), sharey=True)
        for ax, (dname, curves) in zip(axes, panels.items()):
            for i, (m, c) in enumerate(curves.items()):
                ax.plot(list(c), [100 * v for v in c.values()], marker="o", color=COLOURS[i],
                        linestyle="--" if m in dashed else "-", label=m)
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(counts), [str(c) for c in counts])
            ax.axvline(8.5, color="grey", linewidth=0.8)
            ax.text(9, 5, "across nodes ->", fontsize=8, color="grey")
            ax.set_ylim(0, 105)
            ax.set_xlabel("GPUs")
            ax.set_title(dname)
            ax.legend(fontsize=8)
        axes[0].set_ylabel(ylabel)
        fig.tight_layout()
        return save(fig, path)


def largest_model_plot(path: Path, cards: list[str], counts: tuple[int, ...], methods: dict[str, str],
                       params_b: dict[tuple, float], line_b: float) -> Path:
    """Largest model that fits (billions; `params_b[(card, gpus, method)]`) per card, a panel per
    GPU count, a bar per method (`methods`: key -> legend label); matplotlib's default style."""
    fig, axes = plt.subplots(1, len(counts), figsize=(9, 3.6), sharey=True)
    width = 0.26
    for ax, gpus in zip(axes, counts):
        for i, (method, label) in enumerate(methods.items()):
            xs = [c + (i - 1) * width for c in range(len(cards))]
            ax.bar(xs, [max(params_b[(card, gpus, method)], 0.5) for card in cards], width, label=label)
        ax.axhline(line_b, color="grey", linestyle="--", linewidth=1)
        ax.text(len(cards) - 0.5, line_b * 72 / 70, f"{line_b:g}B", ha="right", va="bottom", fontsize=8, color="grey")
        ax.set_yscale("log")
        figures.plain_log_axis(ax.yaxis, [max(b, 0.5) for b in params_b.values()])
        ax.set_xticks(range(len(cards)), list(cards))
        ax.set_title(f"{gpus} GPU{'s' if gpus > 1 else ''}: largest model that fits")
    axes[0].set_ylabel("parameters (billions)")
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    return save(fig, path)
