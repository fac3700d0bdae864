"""Writing a matplotlib figure to a file, the same way for every plot of the reports."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, path: Path, *, tight_layout: bool = True, whole_legend: bool = False, dpi: int = 120) -> Path:
    """Lay the figure out (unless told not to), write it to `path` (its folder made if missing) and
    close it. `whole_legend`: the saved box grows to what is drawn outside the axes (a legend below)."""
    if tight_layout:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, **({"bbox_inches": "tight"} if whole_legend else {}))
    plt.close(fig)
    return path
