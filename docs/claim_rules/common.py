"""What every claim's rules share: the build context, the model ladder and the page's text formatters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scalesim.app.claims import Simulations, load
from scalesim.models import get_model
from scalesim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios" / "claims"
SPECS = ROOT / "docs" / "claims"          # <id>.yaml: what each claim says, quotes, grids, scenarios
GiB = 2.0**30


@dataclass
class Ctx:
    """One build: reduced grids or not, where plots go, what was written, the simulations it owns."""

    quick: bool
    plots: Path
    written: list[Path] = field(default_factory=list)
    sims: Simulations = field(default_factory=Simulations)
    ladder: tuple = ()

    def grid(self, spec: dict, key: str) -> list:
        """A grid of the claim's spec: `key` in full, `key_quick` in quick builds when the spec has one."""
        return spec.get(f"{key}_quick", spec[key]) if self.quick else spec[key]

    def rungs(self, names: list[str]) -> list[tuple[str, Any, float]]:
        return [entry for entry in self.ladder if entry[0] in names]

    def load(self, rel: str) -> tuple[Scenario, str]:
        return load(SCENARIOS, rel)

    def plot(self, path: Path) -> Path:
        self.written.append(path)
        return path


def claim_spec(claim_id: str) -> dict:
    return yaml.safe_load((SPECS / f"{claim_id}.yaml").read_text())


# ----------------------------------------------------------------------------- the model ladder


def _llama(layers: int, hidden: int) -> dict:
    """A Llama-shaped transformer (SwiGLU, RMSNorm, rotary, 128-wide heads, 32k vocabulary)."""
    ffn = (int(8 * hidden / 3) + 255) // 256 * 256
    return {"kind": "transformer", "layers": layers, "hidden": hidden, "heads": hidden // 128,
            "vocab": 32000, "ffn": "swiglu", "ffn_hidden": ffn}


def model_ladder(shapes: list) -> tuple[tuple[str, Any, float], ...]:
    """(name, zoo name or inline mapping, parameters) for each rung (a zoo name or [layers, hidden])."""
    out = []
    for shape in shapes:
        spec = shape if isinstance(shape, str) else _llama(*shape)
        params = get_model(spec, seq_len=2048).params
        if not isinstance(spec, str):
            spec = {**spec, "name": f"llama-{fmt_params(params).lower()}"}
        out.append((spec if isinstance(spec, str) else spec["name"], spec, params))
    return tuple(out)


# ----------------------------------------------------------------------------- text


def fmt_params(p: float) -> str:
    if p >= 9.95e9:
        return f"{p / 1e9:.0f}B"
    if p >= 1e9:
        return f"{p / 1e9:.1f}B"
    return f"{p / 1e9:.2f}B"


def pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def signed(x: float) -> str:
    return ("+" if x >= 0 else "") + pct(x)


def span(values, fmt=pct, sep=" to ") -> str:
    """'a to b' over the values that are not None, or 'a' when both ends print the same."""
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    lo, hi = fmt(min(known)), fmt(max(known))
    return lo if lo == hi else f"{lo}{sep}{hi}"


def times(x: float) -> str:
    return f"{x:.2f}x"


def money(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 100:
        return f"${x:,.0f}"
    if x >= 1:
        return f"${x:,.2f}"
    return f"${x:.3f}"


def days(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    d = seconds / 86400
    return f"{d:,.0f} d" if d >= 10 else f"{d:.1f} d" if d >= 1 else f"{seconds / 3600:.1f} h"


def crossover(labels: list[str], values: list[float | None], threshold: float,
              what: str = "") -> tuple[str, int | None]:
    """Where `values` cross `threshold` along the grid, as text ('between A and B') and the index after it.

    Points that are None (not simulated, does not fit) are skipped. Without a crossing the text
    says on which side the whole grid lies.
    """
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    for (i, a), (j, b) in zip(pts, pts[1:]):
        if (a > threshold) != (b > threshold):
            return f"between {labels[i]} and {labels[j]}", j
    if not pts:
        return "nowhere (no point ran)", None
    side = "above" if pts[0][1] > threshold else "at or below"
    return f"not on the grid (all {side}{what} from {labels[pts[0][0]]} to {labels[pts[-1][0]]})", None


def md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
