#!/usr/bin/env python3
"""Rebuild docs/claims.md and its plots (docs/claims/*.png) by running scalesim.

Each section of the page tests one claim of two buyer's-guide articles
(RTX 4090 vs A100, RTX 4090 vs H100; quoted in the page): it loads the
scenario files of scenarios/claims/<claim>/, sweeps a parameter (model size
along a ladder of Llama-shaped transformers, batch, micro-batch, GPU count),
simulates every point with the library API, and reports where the answer
changes sign as "between A and B" on the grid it swept. Every figure in the
page comes from this run; nothing is typed by hand.

    python3 docs/build_claims.py                  # the page: docs/claims.md, docs/claims/*.png
    python3 docs/build_claims.py --quick --out DIR   # reduced grids (the test uses this)
    python3 docs/build_claims.py --only fp8 --out DIR

Output is byte-for-byte repeatable: the simulation is deterministic, the
page has no timestamps, and PNGs are written without matplotlib's Software
tag. Steps are simulated with one rank per pipeline stage standing for its
identical peers (scalesim's symmetric mode, which the test suite checks
against the full simulation), also on one node.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

import scalesim.app.setup as runner  # noqa: E402
from scalesim.costs.memory import FRAGMENTATION, FRAMEWORK_OVERHEAD_BYTES, state_bytes_per_param  # noqa: E402
from scalesim.errors import InputError  # noqa: E402
from scalesim.hardware import get_gpu  # noqa: E402
from scalesim.models import get_model  # noqa: E402
from scalesim.app.setup import memory_of, prepare, simulate_setup  # noqa: E402
from scalesim.app.run import run  # noqa: E402
from scalesim.scenario import Scenario, load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SCENARIOS = ROOT / "scenarios" / "claims"
PLOT_DIR = "claims"                       # plots go to <out>/claims/, linked relatively from the page

GiB = 2.0**30

# ----------------------------------------------------------------------------- deterministic plots

matplotlib.rcParams.update({"svg.hashsalt": "scalesim-claims", "figure.dpi": 100,
                            "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B2", "#937860", "#DA8BC3", "#8C8C8C")


def save(fig, path: Path, written: list[Path] | None = None) -> Path:
    """Write a figure so that the same figure gives the same bytes: no Software/Date tags."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if written is not None:
        written.append(path)
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


# ----------------------------------------------------------------------------- the model ladder


def _llama(layers: int, hidden: int) -> dict:
    """A Llama-shaped transformer (SwiGLU, RMSNorm, rotary, 128-wide heads, 32k vocabulary)."""
    ffn = (int(8 * hidden / 3) + 255) // 256 * 256
    return {"kind": "transformer", "layers": layers, "hidden": hidden, "heads": hidden // 128,
            "vocab": 32000, "ffn": "swiglu", "ffn_hidden": ffn}


# Zoo names where the zoo has the size (Llama 2 7B/13B/70B), inline otherwise. One family, so
# the sizes differ only in width and depth (Llama 2 70B alone has grouped-query attention).
_SHAPES = [(24, 1024), (22, 1536), (24, 1792), (24, 2048), (24, 2304), (26, 2560), (32, 2560), (32, 3072),
           (32, 3584), "llama2-7b", (36, 4608), "llama2-13b", (44, 5632), (44, 6144), (52, 6656), (60, 7168),
           (64, 8192), "llama2-70b"]


@functools.cache
def _ladder() -> tuple[tuple[str, Any, float], ...]:
    """(name, zoo name or inline mapping, parameters) for each rung, smallest first."""
    out = []
    for shape in _SHAPES:
        spec = shape if isinstance(shape, str) else _llama(*shape)
        params = get_model(spec, seq_len=2048).params
        if not isinstance(spec, str):
            spec = {**spec, "name": f"llama-{fmt_params(params).lower()}"}
        out.append((spec if isinstance(spec, str) else spec["name"], spec, params))
    return tuple(out)


def fmt_params(p: float) -> str:
    if p >= 9.95e9:
        return f"{p / 1e9:.0f}B"
    if p >= 1e9:
        return f"{p / 1e9:.1f}B"
    return f"{p / 1e9:.2f}B"


def pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


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


# ----------------------------------------------------------------------------- simulation helpers


def load(rel: str) -> tuple[Scenario, str]:
    """A claims scenario by its path under scenarios/claims/, with that path as its name in errors."""
    scenario, _ = load_scenario(SCENARIOS / rel)
    return scenario, f"scenarios/claims/{rel}"


def vary(s: Scenario, *, model: Any = None, **sections: dict) -> Scenario:
    """A copy with the model replaced (zoo name or inline mapping) and some section keys changed."""
    data = s.model_dump()
    if model is not None:
        data["model"] = model
    for section, changes in sections.items():
        data[section] = {**data[section], **changes}
    return Scenario.model_validate(data)


def params_of(s: Scenario) -> float:
    return get_model(s.model, seq_len=s.training.seq_len).params


_CACHE: dict[tuple, Any] = {}


def _key(kind: str, s: Scenario, *extra) -> tuple:
    return (kind, s.model_dump_json(), *extra)


def memory(s: Scenario, file: str) -> tuple[float, float] | None:
    """(bytes needed per GPU, capacity), or None when scalesim refuses the plan."""
    key = _key("memory", s)
    if key not in _CACHE:
        try:
            setup = prepare(s, file)
            _CACHE[key] = (memory_of(setup).total, setup.gpu.memory_bytes)
        except InputError:
            _CACHE[key] = None
    return _CACHE[key]


def fits(s: Scenario, file: str) -> bool:
    m = memory(s, file)
    return m is not None and m[0] <= m[1]


def step_time(s: Scenario, file: str) -> float:
    """Simulated step time, whether or not the plan fits in memory (for what-if references)."""
    key = _key("step", s)
    if key not in _CACHE:
        _CACHE[key] = simulate_setup(prepare(s, file)).end_s
    return _CACHE[key]


def result(s: Scenario, file: str, *, baseline: bool = False, scaling: tuple[int, ...] = ()) -> dict | None:
    """`scalesim run --json`'s object for a plan that fits (None when it does not)."""
    if not fits(s, file):
        return None
    key = _key("run", s, baseline, scaling)
    if key not in _CACHE:
        r = run(s, file, baseline=baseline, scaling_counts=list(scaling) or None)
        _CACHE[key] = r.to_json()
    return _CACHE[key]


# ----------------------------------------------------------------------------- plan search

RECOMPUTE = ("none", "selective", "full")
SHARDING = ((0, False), (1, False), (2, False), (3, False), (3, True))   # (zero, optimizer offload)
SPLITS = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (1, 4))               # (tp, pp)
MICRO = (16, 8, 4, 2, 1)


@dataclass(frozen=True)
class Plan:
    tp: int
    pp: int
    level: int          # index into SHARDING
    recompute: int      # index into RECOMPUTE
    micro_batch: int

    @property
    def label(self) -> str:
        zero, offload = SHARDING[self.level]
        parts = [f"tp{self.tp}"] if self.tp > 1 else []
        parts += [f"pp{self.pp}"] if self.pp > 1 else []
        parts += [f"ZeRO-{zero}"] if zero else ([] if parts else ["DDP"])
        parts += ["offload"] if offload else []
        parts += [f"{RECOMPUTE[self.recompute]} recompute"] if self.recompute else []
        return ", ".join(parts) + f", mb {self.micro_batch}"

    def apply(self, s: Scenario, gpus: int) -> Scenario:
        zero, offload = SHARDING[self.level]
        return vary(s, parallel={"dp": gpus // (self.tp * self.pp), "tp": self.tp, "pp": self.pp, "zero": zero,
                                 "offload_optimizer": offload},
                    training={"micro_batch": self.micro_batch, "activation_checkpointing": RECOMPUTE[self.recompute]})

    def dominates(self, other: "Plan") -> bool:
        """Same split, no more sharding or recompute, no smaller micro-batch."""
        return (self != other and (self.tp, self.pp) == (other.tp, other.pp) and self.level <= other.level
                and self.recompute <= other.recompute and self.micro_batch >= other.micro_batch)


def gpus_of(s: Scenario) -> int:
    if s.cluster.gpus:
        return s.cluster.gpus
    from scalesim.topology import load_node_design

    return load_node_design(s.cluster.node, key="cluster.node").gpus * s.cluster.nodes


def candidate_plans(s: Scenario, file: str, *, splits=SPLITS, micro=MICRO, levels=range(len(SHARDING)),
                    recompute=range(len(RECOMPUTE))) -> list[Plan]:
    """Plans that fit and that no other fitting plan dominates.

    For each split (tp, pp), sharding level and recompute, the largest micro-batch that fits
    (with a pipeline, the largest that still gives 4 x pp micro-batches per step, if one fits).
    ZeRO-2/3 and offload only without model parallelism (as DeepSpeed allows).
    """
    gpus = gpus_of(s)
    batch = s.training.global_batch
    found: list[Plan] = []
    for tp, pp in splits:
        if gpus % (tp * pp):
            continue
        dp = gpus // (tp * pp)
        lv = [v for v in levels if (SHARDING[v][0] <= 1 and not SHARDING[v][1]) or (tp == 1 and pp == 1)]
        lv = [v for v in lv if dp > 1 or SHARDING[v][0] == 0]
        if not lv:
            continue
        mbs = [m for m in micro if batch % (dp * m) == 0]
        if pp > 1:
            deep = [m for m in mbs if batch // (dp * m) >= 4 * pp]
            mbs = deep + [m for m in mbs if m not in deep]
        if not mbs:
            continue
        # The least memory this split can take; if that does not fit, nothing of the split does.
        lightest = Plan(tp, pp, max(lv), max(recompute), min(mbs))
        if not fits(lightest.apply(s, gpus), file):
            continue
        for rc in recompute:
            for level in lv:
                for mb in mbs:
                    plan = Plan(tp, pp, level, rc, mb)
                    if fits(plan.apply(s, gpus), file):
                        found.append(plan)
                        break
    return [p for p in found if not any(q.dominates(p) for q in found)]


def best_plan(s: Scenario, file: str, **limits) -> tuple[Plan, Scenario, float] | None:
    """The fastest plan that fits (by simulated step time), or None when none fits."""
    gpus = gpus_of(s)
    best = None
    for plan in candidate_plans(s, file, **limits):
        scenario = plan.apply(s, gpus)
        t = step_time(scenario, file)
        if best is None or t < best[2]:
            best = (plan, scenario, t)
    return best


# ----------------------------------------------------------------------------- page sections


@dataclass
class Section:
    id: str
    title: str
    quotes: list[str]
    verdict: str
    body: list[str] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)    # (file name under claims/, alt text)
    files: str = ""
    extra_commands: list[str] = field(default_factory=list)

    def markdown(self, number: int) -> str:
        out = [f'<a id="{self.id}"></a>', "", f"## {number}. {self.title}", ""]
        out += ["> " + "\n>\n> ".join(self.quotes)]
        out += ["", f"**Verdict:** {self.verdict}", ""]
        for name, alt in self.plots:
            out += [f"![{alt}]({PLOT_DIR}/{name})", ""]
        out += self.body
        out += ["", f"Scenarios: `{self.files}`. Regenerate this section:", "", "```",
                f"python3 docs/build_claims.py --only {self.id} --out /tmp/claims", *self.extra_commands, "```", ""]
        return "\n".join(out)


@dataclass
class Ctx:
    quick: bool
    plots: Path
    written: list[Path] = field(default_factory=list)

    def pick(self, full: list, quick: list) -> list:
        return quick if self.quick else full


def ladder(ctx: Ctx, names_full: list[str], names_quick: list[str]) -> list[tuple[str, Any, float]]:
    wanted = ctx.pick(names_full, names_quick)
    return [entry for entry in _ladder() if entry[0] in wanted]


# ----------------------------------------------------------------------------- 1. PCIe vs NVLink


def claim_pcie_vs_nvlink(ctx: Ctx) -> Section:
    designs = [load("pcie-vs-nvlink/8x4090-pcie.yaml"), load("pcie-vs-nvlink/8x4090-pcie-p2p.yaml"),
               load("pcie-vs-nvlink/8xa100-pcie.yaml"), load("pcie-vs-nvlink/8xa100-nvswitch.yaml")]
    short = ["4090 PCIe (stock)", "4090 PCIe (P2P)", "A100 PCIe", "A100 NVSwitch"]
    models = ctx.pick(["gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "gpt3-2.7b"], ["gpt2-124m", "gpt2-774m"])
    batches = ctx.pick([64, 128, 256, 512], [64, 256])
    ref_batch = 128 if 128 in batches else batches[-1]
    base4090, f4090 = designs[0]
    sizes = [params_of(vary(base4090, model=m)) for m in models]
    names = [f"{m} ({fmt_params(p)})" for m, p in zip(models, sizes)]

    # One plan per model for every design: the lightest ZeRO stage and the largest micro-batch
    # (<= 8) that fit the 24 GB card without recompute.
    plans: dict[str, Plan] = {}
    for m in models:
        plan = best_plan(vary(base4090, model=m, training={"global_batch": 64}), f4090,
                         splits=((1, 1),), levels=range(3), recompute=(0,), micro=(8, 4, 2, 1))
        plans[m] = plan[0]
    rows = {}      # (model, batch, design index) -> run json
    for m in models:
        for b in batches:
            for i, (s, f) in enumerate(designs):
                scenario = plans[m].apply(vary(s, model=m, training={"global_batch": b}), 8)
                rows[(m, b, i)] = result(scenario, f, baseline=True)

    def step(m, b, i):
        return rows[(m, b, i)]["step_time_s"]

    nvlink = {(m, b): step(m, b, 2) / step(m, b, 3) - 1 for m in models for b in batches}
    p2p = {(m, b): step(m, b, 0) / step(m, b, 1) - 1 for m in models for b in batches}
    eff = {(m, b, i): rows[(m, b, i)]["scaling_efficiency"] for m in models for b in batches for i in range(4)}
    vs_dgx = {(m, b): step(m, b, 0) / step(m, b, 3) for m in models for b in batches}

    # Plots: NVLink's advantage by model and batch; scaling efficiency by design at the reference batch.
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for j, b in enumerate(batches):
        ax1.plot(sizes, [100 * nvlink[(m, b)] for m in models], marker="o", color=COLOURS[j],
                 label=f"{b} x 1,024 tokens per step")
    ax1.axhline(10, color="grey", linestyle=":", linewidth=1)
    params_axis(ax1, sizes)
    ax1.set_ylabel("throughput gain of NVSwitch over PCIe (%)")
    ax1.set_title("NVLink's advantage, same A100s, same plan")
    ax1.legend(fontsize=8)
    for i, name in enumerate(short):
        ax2.plot(sizes, [100 * eff[(m, ref_batch, i)] for m in models], marker="o", color=COLOURS[i], label=name)
    params_axis(ax2, sizes)
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("scaling efficiency, 8 GPUs vs 1 (%)")
    ax2.set_title(f"8-GPU scaling at {ref_batch} x 1,024 tokens per step")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    save(fig, ctx.plots / "pcie-vs-nvlink.png", ctx.written)

    # Crossovers along the batch, per model: where NVLink's gain falls to 10%, and where the
    # stock 4090 server reaches 90% scaling efficiency.
    blabels = [f"{b}" for b in batches]
    gain_cross, eff_cross, gain_at = [], [], {}
    for m, name in zip(models, names):
        text, j = crossover(blabels, [nvlink[(m, b)] for b in batches], 0.10)
        gain_cross.append(f"{name}: {text}")
        gain_at.setdefault(text if j is not None else None, []).append(name)
        text, _ = crossover(blabels, [eff[(m, b, 0)] for b in batches], 0.90)
        eff_cross.append(f"{name}: {text}")
    stock = [eff[(m, b, 0)] for m in models for b in batches]
    dgx = [eff[(m, b, 3)] for m in models for b in batches]
    small_b, large_b = batches[0], batches[-1]
    big = models[-1]
    above = [b for b in batches if any(nvlink[(m, b)] > 0.10 for m in models)]
    direction = "True in direction" if min(nvlink.values()) > 0 else "Not always true"
    head = f"{direction}; " + (
        "NVLink's gain exceeds 10% at every batch on the grid." if above == batches else
        "NVLink's gain stays under 10% at every batch on the grid." if not above else
        f"NVLink's gain exceeds 10% only at {max(above)} sequences of 1,024 tokens per step or fewer.")
    verdict = (f"**{head}** With the same A100 GPUs and the same plan, "
               f"NVSwitch delivers {span(nvlink.values())} more throughput than "
               f"PCIe on this grid. The gain is set by the tokens per step (compute to hide each gradient byte "
               f"behind), not by model size: it falls to 10% or less "
               + "; ".join(f"{t} sequences of 1,024 tokens per step for {', '.join(n)}" if t else
                           f"nowhere on the grid for {', '.join(n)} (never above 10%)" for t, n in gain_at.items())
               + f". The stock-driver 8x 4090 scales at {span(stock)} against {span(dgx)} on the DGX A100.")

    table_rows = []
    for m, name in zip(models, names):
        for b in batches:
            table_rows.append([name, str(b), plans[m].label] + [pct(eff[(m, b, i)], 1) for i in range(4)]
                              + [pct(nvlink[(m, b)], 1), pct(p2p[(m, b)], 1), f"{vs_dgx[(m, b)]:.2f}x"])
    body = [
        "What is compared: four 8-GPU servers run the same data-parallel plan per model (the lightest ZeRO "
        "stage and the largest micro-batch up to 8 that fit the 24 GB card without recompute, so that the "
        "designs differ only in hardware). *Scaling efficiency* is per-GPU throughput against the same plan "
        "on one GPU; it exceeds 100% with ZeRO because each of the 8 GPUs updates only its eighth of the "
        "optimizer state, which one GPU does alone. *NVLink gain* compares the DGX A100 with a hypothetical "
        "server of the same A100 SXM GPUs on PCIe 4.0 switches with peer-to-peer, which isolates the "
        "interconnect. *P2P gain* is what the patched driver buys the 4090s.",
        "",
        "Crossovers along the batch (sequences of 1,024 tokens per step):",
        "",
        "- NVLink gain falls to 10% or less: " + "; ".join(gain_cross) + ".",
        "- stock 8x 4090 reaches 90% scaling efficiency: " + "; ".join(eff_cross) + ".",
        f"- At the largest model ({names[-1]}) and the smallest batch ({small_b} sequences), the stock 8x 4090 "
        f"scales at {pct(eff[(big, small_b, 0)])}; the patched P2P driver recovers {pct(p2p[(big, small_b)])} "
        f"of throughput there, {pct(p2p[(big, large_b)])} at {large_b} sequences.",
        f"- A step on the stock 8x 4090 takes {min(vs_dgx.values()):.2f}x to {max(vs_dgx.values()):.2f}x as long "
        f"as on the DGX A100: mostly the A100's faster compute, not the interconnect.",
        (f"- {', '.join(n for m, n in zip(models, names) if SHARDING[plans[m].level][0])} need ZeRO to fit 24 GB; "
         f"ZeRO's all-gather of the updated weights comes after the backward pass and is not hidden, which "
         f"raises their NVLink gain at a given batch." if any(SHARDING[p.level][0] for p in plans.values()) else
         "- Every model fits 24 GB with plain DDP."),
        "",
        md_table(["model", "batch (seq.)", "plan"] + [f"eff. {n}" for n in short]
                 + ["NVLink gain", "P2P gain", "4090 step / DGX step"], table_rows, "llr" + "r" * 7),
    ]
    return Section("pcie-vs-nvlink", "PCIe vs NVLink: does the 4090 scale worse?", [
        "Multi-GPU setups with 4090s have lower interconnect bandwidth and higher communication overhead, making "
        "them less ideal for multi-GPU training. [...] A100 with NVLink and NVSwitch: Much better scaling with "
        "lower sync overhead. *(RTX 4090 vs A100)*"], verdict, body,
        [("pcie-vs-nvlink.png", "NVLink gain and scaling efficiency against model size")],
        "scenarios/claims/pcie-vs-nvlink/*.yaml",
        ["scalesim compare scenarios/claims/pcie-vs-nvlink/*.yaml"])


# ----------------------------------------------------------------------------- 2. what fits in 24 GB

FIT_FILES = [("fit-24gb/1x4090-adam.yaml", "1 GPU, bf16 mixed precision"),
             ("fit-24gb/1x4090-adam-fp32.yaml", "1 GPU, fp32"),
             ("fit-24gb/1x4090-recompute.yaml", "1 GPU + full recompute"),
             ("fit-24gb/1x4090-offload.yaml", "1 GPU + recompute + optimizer offload"),
             ("fit-24gb/8x4090-zero2.yaml", "8 GPUs, ZeRO-2"),
             ("fit-24gb/8x4090-zero3-recompute.yaml", "8 GPUs, ZeRO-3 + full recompute"),
             ("fit-24gb/8x4090-zero3-offload.yaml", "8 GPUs, ZeRO-3 + recompute + offload")]


def claim_fit_24gb(ctx: Ctx) -> Section:
    rungs = _ladder() if not ctx.quick else _ladder()[::3]
    names = [f"{fmt_params(p)}" for _, _, p in rungs]
    claimed = 6e9
    table, series, largest = [], [], []
    for rel, label in FIT_FILES:
        s, f = load(rel)
        need = []
        for _, spec, _ in rungs:
            m = memory(vary(s, model=spec), f)
            need.append(None if m is None else m[0])
        capacity = memory(s, f)[1]
        series.append((label, need))
        fit = [n is not None and n <= capacity for n in need]
        last = max((i for i, ok in enumerate(fit) if ok), default=None)
        if last is None:
            where = f"nothing on the ladder (smallest {names[0]} needs {need[0] / GiB:.1f} GiB)"
        elif last == len(rungs) - 1:
            where = f"the whole ladder, up to {names[-1]}"
        else:
            where = f"{names[last]}, not {names[last + 1]}"
        largest.append((label, last, where))
        seven = next((n for (nm, _, _), n in zip(rungs, need) if nm == "llama2-7b"), None)
        table.append([label, where, "n/a" if seven is None else f"{seven / GiB:.0f} GiB"])

    fig, ax = plt.subplots(figsize=(8, 4.6))
    xs = [p for _, _, p in rungs]
    for i, (label, need) in enumerate(series):
        ax.plot(xs, [None if n is None else n / GiB for n in need], marker="o", markersize=3, color=COLOURS[i],
                label=label)
    ax.axhline(capacity / GiB, color="black", linewidth=1)
    ax.text(xs[0], capacity / GiB * 1.08, f"{capacity / GiB:.0f} GiB (RTX 4090)", fontsize=8)
    ax.axvline(claimed, color="grey", linestyle="--", linewidth=1)
    ax.text(claimed * 1.05, 1.0, "claimed limit 6B", fontsize=8, color="grey", rotation=90,
            transform=ax.get_xaxis_transform(), va="top")
    params_axis(ax, xs)
    ax.set_yscale("log")
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_title("Full fine-tuning with AdamW, 2,048-token sequences, micro-batch 1")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save(fig, ctx.plots / "fit-24gb.png", ctx.written)

    plain = largest[0]
    seven_plain = next(r[2] for r in table if r[0] == plain[0])
    limit = None if plain[1] is None else rungs[plain[1]][2]
    if limit is None:
        head = "False: nothing on the ladder fits one card without memory optimisation."
    elif limit < 0.75 * claimed:
        head = f"False for full fine-tuning: the limit is about {names[plain[1]]}, not 6B."
    elif limit > 1.33 * claimed:
        head = f"Too modest: the limit is about {names[plain[1]]}."
    else:
        head = f"About right: the limit is about {names[plain[1]]}."
    reach = [lab for lab, i, _ in largest if i is not None and rungs[i][2] >= claimed]
    bpp = sum(state_bytes_per_param("bf16", "adamw"))
    verdict = (f"**{head}** With mixed-precision AdamW ({bpp:.0f} bytes per parameter before activations) one 24 GB "
               f"card fits {plain[2]} on this ladder; a 6.7B model (Llama 2 7B) needs {seven_plain} per GPU. "
               f"Memory-saving techniques move the limit: " + "; ".join(f"{lab}: {w}" for lab, _, w in largest[2:])
               + ". " + (f"Only these reach 6B: {'; '.join(reach)}." if reach else "None of them reaches 6B."))
    body = [
        "Memory is scalesim's model (`scalesim run` reports it and exits 3 when a plan does not fit): 16-bit "
        f"weights and gradients, fp32 master weights and Adam moments ({bpp:.0f} bytes per parameter; fp32 "
        f"training {sum(state_bytes_per_param('fp32', 'adamw')):.0f}), ZeRO dividing them over the data-parallel "
        "GPUs, activations per Korthikanti et al. 2022 (flash attention in 16-bit, naive attention in fp32), a "
        f"{FRAMEWORK_OVERHEAD_BYTES / GiB:g} GiB framework allowance and {pct(FRAGMENTATION)} fragmentation. "
        "One sequence of 2,048 tokens "
        "per GPU per micro-batch. The ladder's resolution is the rung spacing (about 1.3x).",
        "",
        md_table(["technique", "largest that fits (next rung does not)", "6.7B (Llama 2 7B) needs"], table, "lrr"),
        "",
        "Not modelled, and what would push the limit further: LoRA/adapters (most of the parameters frozen, "
        "no optimizer state for them), 8-bit optimizers, offloading the weights themselves (ZeRO-Infinity). "
        f"Host memory for offloaded optimizer state is not checked ({state_bytes_per_param('bf16', 'adamw')[2]:.0f} "
        "bytes per parameter in CPU RAM).",
    ]
    return Section("fit-24gb", "What fits in 24 GB?", [
        "The RTX 4090 maxes out around 6 billion parameters without memory optimisation. *(the claim as the "
        "project's seed list paraphrases the guides)*",
        "Your model fits within ~24GB or can be optimized to fit. [...] These methods can let a 4090 train "
        "larger models than its 24GB suggests. *(RTX 4090 vs A100)*"], verdict, body,
        [("fit-24gb.png", "memory per GPU against model size for each technique")],
        "scenarios/claims/fit-24gb/*.yaml", ["scalesim run scenarios/claims/fit-24gb/1x4090-adam.yaml"])


# ----------------------------------------------------------------------------- 3. what the techniques cost

TECHNIQUES = [   # label, parallel changes, training changes
    ("ZeRO-1", {"zero": 1}, {}),
    ("ZeRO-2", {"zero": 2}, {}),
    ("ZeRO-3", {"zero": 3}, {}),
    ("selective recompute", {}, {"activation_checkpointing": "selective"}),
    ("full recompute", {}, {"activation_checkpointing": "full"}),
    ("ZeRO-3 + full recompute", {"zero": 3}, {"activation_checkpointing": "full"}),
    ("ZeRO-2 + optimizer offload", {"zero": 2, "offload_optimizer": True}, {}),
    ("ZeRO-3 + offload + full recompute", {"zero": 3, "offload_optimizer": True}, {"activation_checkpointing": "full"}),
    ("pipeline pp=2", {"pp": 2, "dp": 4}, {}),
    ("pipeline pp=4 + full recompute", {"pp": 4, "dp": 2}, {"activation_checkpointing": "full"}),
    ("pp=4 + ZeRO-1 + full recompute", {"pp": 4, "dp": 2, "zero": 1}, {"activation_checkpointing": "full"}),
    ("tensor tp=2", {"tp": 2, "dp": 4}, {}),
    ("tensor tp=4", {"tp": 4, "dp": 2}, {}),
]
PLAIN = ({"dp": 8, "tp": 1, "pp": 1, "zero": 0, "offload_optimizer": False}, {"activation_checkpointing": "none"})


def claim_memory_techniques(ctx: Ctx) -> Section:
    designs = [(load("memory-techniques/8x4090.yaml"), "8x 4090 PCIe"),
               (load("memory-techniques/8xa100.yaml"), "DGX A100")]
    models = [e for e in _ladder() if e[0] in ctx.pick(["llama-2.7b", "llama-5.2b", "llama2-7b", "llama-9.5b"],
                                                         ["llama-2.7b"])]
    techniques = ctx.pick(TECHNIQUES, [TECHNIQUES[i] for i in (0, 2, 5, 8)])
    data = {}     # (model, design, technique label) -> (fits, GiB, step, overhead)
    for mname, spec, _ in models:
        for ((s, f), dname) in designs:
            plain = vary(s, model=spec, parallel=PLAIN[0], training=PLAIN[1])
            ref = step_time(plain, f)
            m = memory(plain, f)
            data[(mname, dname, "plain DDP")] = (m[0] <= m[1], m[0] / GiB, ref, 0.0)
            for label, par, train in techniques:
                sc = vary(plain, parallel=par, training=train)
                m = memory(sc, f)
                t = step_time(sc, f)
                data[(mname, dname, label)] = (m[0] <= m[1], m[0] / GiB, t, t / ref - 1)
    labels = ["plain DDP"] + [t[0] for t in techniques]

    cols = min(2, len(models))
    rows_ = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(6 * cols, 4.8 * rows_), squeeze=False)
    for ax, (mname, _, params) in zip(axes.flat, models):
        ys = range(len(labels))
        for k, (_, dname) in enumerate(designs):
            vals = [100 * data[(mname, dname, lab)][3] for lab in labels]
            bars = ax.barh([y + (k - 0.5) * 0.4 for y in ys], vals, height=0.4, color=COLOURS[k], label=dname)
            for bar, lab in zip(bars, labels):
                if not data[(mname, dname, lab)][0]:
                    bar.set_hatch("///")
                    bar.set_alpha(0.45)
            for bar, v in zip(bars, vals):
                ax.text(max(v, 0) + 3, bar.get_y() + bar.get_height() / 2, f"{v:+.0f}%", va="center", fontsize=6)
        ax.set_yticks(list(ys), labels, fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlim(right=ax.get_xlim()[1] * 1.12)
        ax.set_xlabel("step time over plain data parallelism (%); hatched: does not fit")
        ax.set_title(f"{fmt_params(params)} ({mname}), 8 GPUs")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.tight_layout()
    save(fig, ctx.plots / "memory-techniques.png", ctx.written)

    findings, rows = [], []
    cheapest = {d: [] for _, d in designs}
    for mname, _, params in models:
        for _, dname in designs:
            fitting = [(data[(mname, dname, lab)][3], lab) for lab in labels if data[(mname, dname, lab)][0]]
            if fitting:
                cost, lab = min(fitting)
                cheapest[dname].append(cost)
                findings.append(f"{fmt_params(params)} on the {dname}: {lab} ({'+' if cost >= 0 else ''}{pct(cost)})")
            else:
                cheapest[dname].append(None)
                findings.append(f"{fmt_params(params)} on the {dname}: no technique tried fits")
        for lab in labels:
            row = [f"{fmt_params(params)}", lab]
            for _, dname in designs:
                ok, gib, t, over = data[(mname, dname, lab)]
                row += [f"{gib:.1f}" + ("" if ok else " (no)"), f"{t:.2f}", ("+" if over >= 0 else "") + pct(over)]
            rows.append(row)
    def spread(label: str, dname: str) -> str:
        vals = [data[(m, dname, label)][3] for m, _, _ in models if (m, dname, label) in data]
        lo, hi = min(vals), max(vals)
        sign = lambda v: ("+" if v >= 0 else "") + pct(v)  # noqa: E731
        return sign(lo) if sign(lo) == sign(hi) else f"{sign(lo)} to {sign(hi)}"

    named = [lab for lab in ("ZeRO-3", "full recompute", "ZeRO-2 + optimizer offload", "tensor tp=2")
             if lab in labels]
    costs = "; ".join(f"{lab}: " + ", ".join(f"{spread(lab, d)} on the {d}" for _, d in designs) for lab in named)
    z3 = {d: [data[(m, d, "ZeRO-3")][3] for m, _, _ in models if (m, d, "ZeRO-3") in data] for _, d in designs}
    pcie_d, nv_d = designs[0][1], designs[1][1]
    depends = bool(z3[pcie_d]) and bool(z3[nv_d]) and min(z3[pcie_d]) > 2 * max(z3[nv_d])
    head = ("True, and the price depends on the interconnect." if depends else
            "True; the price depends little on the interconnect.")
    mnames = [fmt_params(p) for _, _, p in models]
    jumps = []
    for _, d in designs:
        text, j = crossover(mnames, cheapest[d], 0.25)
        jumps.append(f"on the {d} from {text}" if j is not None else
                     f"on the {d} at no size from {mnames[0]} to {mnames[-1]}")
    verdict = (f"**{head}** The cheapest technique that fits costs more than +25% "
               + "; ".join(jumps) + ". Cheapest technique that fits, against "
               "unlimited-memory data parallelism on the same GPUs: " + "; ".join(findings)
               + f". Per technique: {costs}.")
    body = [
        "Each technique is applied to the same 8 GPUs, model and batch (64 sequences of 2,048 tokens, "
        "micro-batch 1) and compared with the step plain data parallelism would take if memory were unlimited "
        "(simulated regardless of fit). Memory and step times are scalesim's; *no* marks plans that do not "
        "fit the GPU. With micro-batch 1, ZeRO-3 gathers every layer's weights again for each of the 8 "
        "micro-batches of a step; larger micro-batches amortise that (section 4's plan search uses them). "
        "Plain data parallelism is PyTorch DDP under autocast, which all-reduces fp32 gradients; the ZeRO "
        "stages reduce 16-bit gradients as DeepSpeed does (`parallel.grad_reduce_dtype`), so where gradient "
        "traffic is the bottleneck (host-staged PCIe) a ZeRO stage can come out faster than the baseline: "
        "that gain is the gradient precision, not the sharding.",
        "",
        md_table(["model", "technique"] + [f"{d} {c}" for _, d in designs for c in ("GiB", "step s", "cost")],
                 rows, "ll" + "r" * 3 * len(designs)),
    ]
    return Section("memory-techniques", "What do memory-saving techniques cost?", [
        "Offloading (CPU and NVMe): Move optimizer states off-GPU, but adds I/O overhead. Model sharding and "
        "pipeline parallelism: Split model across GPUs; depends on strong interconnect bandwidth. These methods "
        "can let a 4090 train larger models than its 24GB suggests, but at the cost of extra complexity. "
        "*(RTX 4090 vs A100)*"], verdict, body,
        [("memory-techniques.png", "step-time cost of each memory-saving technique")],
        "scenarios/claims/memory-techniques/*.yaml",
        ["scalesim compare scenarios/claims/memory-techniques/*.yaml"])


# ----------------------------------------------------------------------------- 4. small vs large models

SIZE_DESIGNS = [("small-vs-large/8x4090.yaml", "8x 4090"), ("small-vs-large/8xa100.yaml", "8x A100"),
                ("small-vs-large/8xh100.yaml", "8x H100")]
SIZE_LADDER = ["llama-0.37b", "llama-0.72b", "llama-1.4b", "llama-2.7b", "llama-5.2b", "llama2-7b", "llama-9.5b",
               "llama2-13b", "llama-20b", "llama-28b"]
SIZE_LADDER_QUICK = ["llama-0.37b", "llama-1.4b"]
TOKENS_PER_PARAM = 20      # compute-optimal budget (Hoffmann et al. 2022, "Chinchilla")


def size_sweep(ctx: Ctx, files=SIZE_DESIGNS, precision: str | None = None) -> dict:
    """Best plan and its run for each design and ladder model: {(design, model): (plan, run json) or None}."""
    out = {}
    for rel, dname in files:
        s, f = load(rel)
        for mname, spec, params in ladder(ctx, SIZE_LADDER, SIZE_LADDER_QUICK):
            training = {"tokens": float(TOKENS_PER_PARAM * round(params, -6))}
            if precision:
                training["precision"] = precision
            found = best_plan(vary(s, model=spec, training=training), f,
                              **({"splits": ((1, 1), (1, 2))} if ctx.quick else {}))
            out[(dname, mname)] = None if found is None else (found[0], result(found[1], f))
    return out


def claim_small_vs_large(ctx: Ctx) -> Section:
    rungs = ladder(ctx, SIZE_LADDER, SIZE_LADDER_QUICK)
    sweep = size_sweep(ctx)
    names = [fmt_params(p) for _, _, p in rungs]
    dnames = [d for _, d in SIZE_DESIGNS]

    def metric(d, m, fn):
        got = sweep[(d, m)]
        return None if got is None else fn(got[1])

    cloud = {d: [metric(d, m, lambda r: r["economics"]["cloud"]["usd_per_million_tokens"]) for m, _, _ in rungs]
             for d in dnames}
    owned = {d: [metric(d, m, lambda r: r["economics"]["on_prem"]["usd_per_million_tokens"]) for m, _, _ in rungs]
             for d in dnames}
    ttt = {d: [metric(d, m, lambda r: r["time_to_train_s"]) for m, _, _ in rungs] for d in dnames}

    xs = [p for _, _, p in rungs]

    def cheaper_until(series: dict, rival: str) -> tuple[str, int | None]:
        """Where the 8x 4090 stops being cheaper than `rival`, by the sign of the cost difference."""
        diff = [None if a is None or b is None else b - a for a, b in zip(series["8x 4090"], series[rival])]
        text, j = crossover(names, diff, 0.0)
        known = [v for v in diff if v is not None]
        if j is not None:
            cheaper_first = known[0] > 0
            side = "cheaper" if cheaper_first else "dearer"
            other = "dearer" if cheaper_first else "cheaper"
            return (f"the 8x 4090 is {side} than the {rival} up to {names[j - 1]} and {other} from {names[j]}",
                    j if cheaper_first else None)
        if known and all(v > 0 for v in known):
            return f"the 8x 4090 is cheaper than the {rival} at every size both can train", len(names)
        return f"the 8x 4090 is dearer than the {rival} at every size on the grid", 0

    fits_4090 = [i for i, v in enumerate(cloud["8x 4090"]) if v is not None]
    last = fits_4090[-1] if fits_4090 else None
    limit = ("nothing" if last is None else f"up to {names[last]}" +
             (" (the end of the grid)" if last == len(names) - 1 else f" (not {names[last + 1]})"))
    speed = [b / a for a, b in zip(ttt["8x H100"], ttt["8x 4090"]) if a is not None and b is not None]
    lines, ends = [], {}
    for label, series in (("renting", cloud), ("owning", owned)):
        parts = []
        for rival in ("8x A100", "8x H100"):
            text, j = cheaper_until(series, rival)
            parts.append(text)
            ends[(label, rival)] = j
        lines.append(f"{label.capitalize()}: " + "; ".join(parts) + ".")

    def cheapest_index(label: str) -> int | None:
        """First ladder index where the 8x 4090 is no longer the cheapest (len: always; 0: never)."""
        known = [v for (lab, _), v in ends.items() if lab == label and v is not None]
        return min(known) if known else None

    def cheapest_until(label: str) -> str:
        j = cheapest_index(label)
        if j is None or j == 0:
            return f"{label}, the 8x 4090 is never the cheapest"
        if j >= len(names):
            return f"{label}, the 8x 4090 is the cheapest at every size on the grid"
        lo, hi = xs[j - 1], xs[j]
        versus = ("which brackets the articles' 7B" if lo < 7e9 <= hi else
                  "above the articles' 7B" if lo >= 7e9 else "below the articles' 7B")
        return (f"{label}, the 8x 4090 is the cheapest up to {names[j - 1]} and no longer from {names[j]} "
                f"({versus})")

    if last is not None and xs[last] >= 20e9:
        at = [(cloud[d][last], d) for d in dnames if cloud[d][last] is not None]
        rank = sorted(at).index((cloud["8x 4090"][last], "8x 4090")) + 1
        big = (f"Their 20B does not need an H100 for memory: the 8x 4090 trains {limit} with ZeRO-3 and CPU "
               f"offload, at {money(cloud['8x 4090'][last])} per million tokens rented there (rank {rank} of "
               f"{len(at)}; cheapest: {min(at)[1]} at {money(min(at)[0])}).")
    else:
        big = f"The 8x 4090 trains {limit}."
    crossing = any(v is not None and 0 < v < len(names) for v in ends.values())
    own = next(got[1]["economics"]["on_prem"] for got in sweep.values() if got is not None)
    head = "True for cost, false for time." if crossing else "Cheapest at every size on the grid, never fastest."
    renting = cheapest_until("renting")
    verdict = (f"**{head}** {renting[0].upper() + renting[1:]}; "
               f"{cheapest_until('owning')}. {big} By time the 8x H100 wins at every size" + (
                   f": the 8x 4090 takes {min(speed):.1f}x to {max(speed):.1f}x as long." if speed else "."))
    findings = lines + [f"Fits at all: the 8x 4090 trains {limit} with the plans searched (ZeRO-3, recompute and "
                        f"CPU offload included)."]

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
    panels = [(cloud, "cloud cost per million tokens (USD)"), (owned, "owned cost per million tokens (USD)"),
              ({d: [None if v is None else v / 86400 for v in ttt[d]] for d in dnames},
               f"days to train {TOKENS_PER_PARAM} tokens per parameter")]
    for ax, (series, ylabel) in zip(axes, panels):
        for i, d in enumerate(dnames):
            ax.plot(xs, series[d], marker="o", color=COLOURS[i], label=d)
        params_axis(ax, xs)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    axes[0].set_title("renting (catalog GPU-hour prices)")
    axes[1].set_title(f"owning ({own['amortisation_years']:g}-year amortisation + power)")
    for ax, label in zip(axes, ("renting", "owning")):
        j = cheapest_index(label)
        if j is not None and 0 < j < len(xs):
            ax.axvspan(xs[j - 1], xs[j], color=COLOURS[0], alpha=0.12)
            ax.text(math.sqrt(xs[j - 1] * xs[j]), 0.02, "8x 4090 no longer\ncheapest", ha="center", fontsize=7,
                    transform=ax.get_xaxis_transform())
    axes[2].set_title("wall time (failures included)")
    fig.tight_layout()
    save(fig, ctx.plots / "small-vs-large.png", ctx.written)

    rows = []
    for (mname, _, params), name in zip(rungs, names):
        for d in dnames:
            got = sweep[(d, mname)]
            if got is None:
                rows.append([name, d, "does not fit", "", "", "", "", ""])
                continue
            plan, r = got
            rows.append([name, d, plan.label, f"{r['tokens_per_s']:,.0f}", pct(r["mfu"]), days(r["time_to_train_s"]),
                         money(r["economics"]["cloud"]["usd_per_million_tokens"]),
                         money(r["economics"]["on_prem"]["usd_per_million_tokens"])])
    body = [
        f"Pre-training each ladder model on {TOKENS_PER_PARAM} tokens per parameter (Hoffmann et al. 2022), 256 "
        "sequences of 2,048 tokens per step, on one 8-GPU server of each kind. For every size and server the "
        "build searches the plan (data parallel with ZeRO 0-3 and optimizer offload; tensor parallel 2/4/8; "
        "pipeline 2/4; recompute none/selective/full; the largest micro-batch that fits) and keeps the fastest "
        "that fits. Renting is GPU-hours at the catalog's typical price; owning is the purchase (GPUs, server) "
        f"over {own['amortisation_years']:g} years plus electricity at ${own['electricity_usd_per_kwh']:g}/kWh and "
        f"PUE {own['pue']:g} (`scalesim run` lists every assumption).",
        "",
        *[f"- {line}" for line in findings],
        "",
        md_table(["model", "server", "fastest plan that fits", "tokens/s", "MFU", "time to train",
                  "cloud $/M tokens", "owned $/M tokens"], rows, "lllrrrrr"),
    ]
    return Section("small-vs-large", "Small models on 4090s, large ones on A100/H100?", [
        "Training: 4090 is strong for small to medium models; A100 is better for large models and high-scale "
        "environments. *(RTX 4090 vs A100)*",
        "Choose the RTX 4090 [...] if you're working with models under 7 billion parameters [...]. Choose the "
        "H100 [...] if you're training models larger than 20 billion parameters. *(RTX 4090 vs H100)*"],
        verdict, body, [("small-vs-large.png", "cost and time to train against model size")],
        "scenarios/claims/small-vs-large/*.yaml", ["scalesim compare scenarios/claims/small-vs-large/*.yaml"])


# ----------------------------------------------------------------------------- 5. bandwidth vs memory


def claim_bandwidth_vs_memory(ctx: Ctx) -> Section:
    (h100, f100), (h200, f200) = load("bandwidth-vs-memory/8xh100.yaml"), load("bandwidth-vs-memory/8xh200.yaml")
    models = ctx.pick(["llama2-7b", "llama2-13b"], ["llama2-7b"])
    micro = ctx.pick([1, 2, 4, 8, 16], [1, 4])
    limits = dict(splits=((1, 1),), levels=(1, 2, 3))     # data parallel with ZeRO-1/2/3, any recompute
    data = {}
    for m in models:
        for mb in micro:
            p100 = best_plan(vary(h100, model=m), f100, micro=(mb,), **limits)
            p200 = best_plan(vary(h200, model=m), f200, micro=(mb,), **limits)
            t100 = None if p100 is None else p100[2]
            t200_same = None if p100 is None else step_time(p100[0].apply(vary(h200, model=m), 8), f200)
            t200_own = None if p200 is None else p200[2]
            data[(m, mb)] = (p100, p200, t100, t200_same, t200_own)

    def gains(m, mb):
        _, _, t100, same, own = data[(m, mb)]
        if t100 is None:           # nothing fits the H100: all of the H200's gain is memory
            return None, None
        return t100 / same - 1, same / own - 1

    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
    for ax, m in zip(axes[0], models):
        bw = [gains(m, mb)[0] for mb in micro]
        mem = [gains(m, mb)[1] for mb in micro]
        x = range(len(micro))
        ax.bar([i - 0.2 for i in x], [0 if v is None else 100 * v for v in bw], width=0.4, color=COLOURS[0],
               label="bandwidth: same plan, H100 -> H200")
        ax.bar([i + 0.2 for i in x], [0 if v is None else 100 * v for v in mem], width=0.4, color=COLOURS[1],
               label="memory: the plan only the H200 fits")
        for i, v in enumerate(bw):
            if v is None:
                ax.text(i, 1, "H100:\nno fit", ha="center", fontsize=7)
        ax.set_xticks(list(x), [str(mb) for mb in micro])
        ax.set_xlabel("micro-batch (sequences of 4,096 tokens per GPU)")
        ax.set_ylabel("throughput gain (%)")
        ax.set_title(f"{m}, 8 GPUs, 128 sequences per step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, ctx.plots / "bandwidth-vs-memory.png", ctx.written)

    g100, g200 = get_gpu("h100-sxm"), get_gpu("h200-sxm")
    rows, mem_where, bw_all, mem_all = [], [], [], []
    for m in models:
        for mb in micro:
            p100, p200, t100, same, own = data[(m, mb)]
            bw, mem = gains(m, mb)
            bw_all.append(bw)
            mem_all.append(mem)
            rows.append([m, str(mb), "does not fit" if p100 is None else p100[0].label,
                         "does not fit" if p200 is None else p200[0].label,
                         "n/a" if t100 is None else f"{t100:.2f}", "n/a" if same is None else f"{same:.2f}",
                         "n/a" if own is None else f"{own:.2f}", pct(bw, 1), pct(mem, 1)])
        ahead = [mb for mb in micro if None not in gains(m, mb) and gains(m, mb)[1] > gains(m, mb)[0]]
        mem_where.append(f"{m} at micro-batch {', '.join(map(str, ahead))}" if ahead else f"{m} at no micro-batch")
    best100 = {m: min((v[2], mb) for mb in micro for v in [data[(m, mb)]] if v[2] is not None) for m in models}
    best200 = {m: min((v[4], mb) for mb in micro for v in [data[(m, mb)]] if v[4] is not None) for m in models}
    overall = [best100[m][0] / best200[m][0] - 1 for m in models]
    largest = [gains(m, micro[-1]) for m in models]
    bw_wins_large = all(None not in g and g[0] >= g[1] for g in largest)
    small = max(overall) < 0.10
    head = ("Neither buys much for training; at large micro-batches bandwidth is the larger of the two."
            if small and bw_wins_large else
            "Neither buys much for training." if small else
            "Bandwidth matters more at large micro-batches." if bw_wins_large else
            "Memory matters more at large micro-batches.")
    verdict = (f"**{head}** The H200 has the H100's compute ({g200.peak_flop_per_s('bf16') / 1e12:.0f} dense bf16 "
               f"TFLOP/s) with {g200.memory_bw_bytes_per_s / g100.memory_bw_bytes_per_s:.2f}x the bandwidth and "
               f"{g200.memory_bytes / g100.memory_bytes:.2f}x the memory. "
               f"Bandwidth alone (same plan) buys {span(bw_all, lambda v: pct(v, 1))} at every micro-batch: "
               f"large-batch training is compute-bound. Memory buys {span([v for v in mem_all if v], pct)} where "
               f"it spares the recompute the H100 needs ({'; '.join(mem_where)}) and nothing elsewhere. Best "
               f"against best over the micro-batches, the H200 is {span(overall, pct)} faster, because the H100 "
               f"reaches nearly the same speed with a micro-batch that fits without recompute. (The article said "
               f"this of inference, which scalesim does not simulate.)")
    body = [
        "For each micro-batch, each GPU gets its fastest data-parallel plan that fits (ZeRO-1/2/3, recompute "
        "none/selective/full). *Bandwidth gain*: the H100's plan run on the H200 against the H100 (same work, "
        f"more bandwidth; the catalog's GEMM efficiencies also differ: {g100.gemm_efficiency:g} and "
        f"{g200.gemm_efficiency:g}). *Memory gain*: the "
        "H200's own plan (less recompute or sharding) against the H100's plan on the H200.",
        "",
        md_table(["model", "micro-batch", "H100 plan", "H200 plan", "H100 step s", "H200 same plan s",
                  "H200 own plan s", "bandwidth gain", "memory gain"], rows, "lrllrrrrr"),
    ]
    return Section("bandwidth-vs-memory", "Bandwidth or memory: which does the H100 class buy?", [
        "Account for memory bandwidth, not just VRAM. The H100's bandwidth advantage matters more than its "
        "additional memory for large batch inference. *(RTX 4090 vs H100; tested here for training)*"],
        verdict, body, [("bandwidth-vs-memory.png", "throughput gain from bandwidth and from memory")],
        "scenarios/claims/bandwidth-vs-memory/*.yaml",
        ["scalesim compare scenarios/claims/bandwidth-vs-memory/*.yaml"])


# ----------------------------------------------------------------------------- 6. FP8


def claim_fp8(ctx: Ctx) -> Section:
    rungs = ladder(ctx, SIZE_LADDER, SIZE_LADDER_QUICK)
    names = [fmt_params(p) for _, _, p in rungs]
    sweep = size_sweep(ctx)      # the bf16 plans of section 4 (cached)
    files = {"8x H100": load("fp8/8xh100-fp8.yaml"), "8x 4090": load("fp8/8x4090-fp8.yaml")}
    speed, fp8_runs = {}, {}
    for d, (s, f) in files.items():
        for mname, spec, params in rungs:
            got = sweep[(d, mname)]
            if got is None:
                speed[(d, mname)] = None
                continue
            plan, bf16 = got
            budget = {"tokens": float(TOKENS_PER_PARAM * round(params, -6))}
            scenario = plan.apply(vary(s, model=spec, training=budget), 8)
            r = result(scenario, f)
            fp8_runs[(d, mname)] = r
            speed[(d, mname)] = None if r is None else r["tokens_per_s"] / bf16["tokens_per_s"]
    a100 = [sweep[("8x A100", m)] for m, _, _ in rungs]
    vs_a100 = [None if fp8_runs.get(("8x H100", m)) is None or a is None else
               fp8_runs[("8x H100", m)]["tokens_per_s"] / a[1]["tokens_per_s"] for (m, _, _), a in zip(rungs, a100)]
    h_bf16_vs_a100 = [None if sweep[("8x H100", m)] is None or a is None else
                      sweep[("8x H100", m)][1]["tokens_per_s"] / a[1]["tokens_per_s"]
                      for (m, _, _), a in zip(rungs, a100)]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [p for _, _, p in rungs]
    for i, d in enumerate(files):
        ax1.plot(xs, [speed[(d, m)] for m, _, _ in rungs], marker="o", color=COLOURS[i], label=d)
    peak_ratio = get_gpu("h100-sxm").peak_flop_per_s("fp8") / get_gpu("h100-sxm").peak_flop_per_s("bf16")
    ax1.axhline(peak_ratio, color="grey", linestyle=":", linewidth=1)
    ax1.text(xs[0], peak_ratio - 0.07, f"FP8/bf16 peak ratio ({peak_ratio:.0f}x)", fontsize=8, color="grey")
    params_axis(ax1, xs)
    ax1.set_ylim(0.8, peak_ratio + 0.1)
    ax1.set_ylabel("training throughput, FP8 / bf16")
    ax1.set_title("What FP8 buys, same plan, 8 GPUs")
    ax1.legend(fontsize=8)
    ax2.plot(xs, vs_a100, marker="o", color=COLOURS[0], label="8x H100 FP8 / 8x A100 bf16")
    ax2.plot(xs, h_bf16_vs_a100, marker="o", color=COLOURS[2], label="8x H100 bf16 / 8x A100 bf16")
    ax2.axhline(6.0, color="grey", linestyle=":", linewidth=1)
    ax2.text(xs[0], 5.7, "claimed 6x", fontsize=8, color="grey")
    params_axis(ax2, xs)
    ax2.set_ylim(0, 6.5)
    ax2.set_ylabel("throughput ratio")
    ax2.set_title("H100 against A100")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    save(fig, ctx.plots / "fp8.png", ctx.written)

    hs = [speed[("8x H100", m)] for m, _, _ in rungs]
    gs = [speed[("8x 4090", m)] for m, _, _ in rungs]
    h_text, h_j = crossover(names, hs, 1.25)
    g_peak = max((v, n) for v, n in zip(gs, names) if v is not None)
    ratio = max(v for v in vs_a100 if v is not None)
    head = ("True in direction, overstated in size" if max(v for v in hs if v) < 1.8 else "True") + (
        f": FP8 gives the H100 {span(hs, times)}, and {span(vs_a100, lambda v: f'{v:.1f}x')} an A100, "
        f"not 6x." if ratio < 5 else ".")
    g4090, gh100 = get_gpu("rtx4090"), get_gpu("h100-sxm")
    caveat = ("" if g4090.fp8_gemm_efficiency is not None else
              f" Caveat: the catalog has a measured FP8 GEMM efficiency for the H100 ({gh100.fp8_gemm_efficiency:g}) "
              f"but none for the 4090, which then gets its bf16 efficiency ({g4090.gemm_efficiency:g}) in FP8 too: "
              f"its FP8 gain is an upper bound.")
    verdict = (f"**{head}** FP8 speeds 8x H100 training up by {span(hs, times)} on this ladder (the FP8/bf16 peak "
               f"ratio is {gh100.peak_flop_per_s('fp8') / gh100.peak_flop_per_s('bf16'):.0f}x; attention stays "
               f"16-bit and the casts cost memory traffic); the speed-up "
               + (f"passes 1.25x {h_text}." if h_j is not None else f"stays on one side of 1.25x ({h_text}).")
               + f" The H100 in FP8 is {span(vs_a100, lambda v: f'{v:.1f}x')} an A100 in bf16 (in bf16 "
               f"{span(h_bf16_vs_a100, lambda v: f'{v:.1f}x')}). The RTX 4090 does have FP8 tensor cores (Ada: "
               f"{g4090.peak_flop_per_s('fp8') / 1e12:.0f} dense TFLOP/s with FP32 accumulate, "
               f"{g4090.peak_flop_per_s('fp8') / g4090.peak_flop_per_s('bf16'):.0f}x its bf16), and scalesim gives "
               f"it {span(gs, times)} "
               f"from FP8 (most at {g_peak[1]}, {g_peak[0]:.2f}x), falling where CPU offload and ZeRO-3 "
               f"communication dominate the step.{caveat}")
    rows = []
    for (mname, _, params), name, a in zip(rungs, names, a100):
        for d in files:
            got = sweep[(d, mname)]
            if got is None:
                rows.append([name, d, "does not fit", "", "", "", ""])
                continue
            plan, bf16 = got
            r = fp8_runs.get((d, mname))
            rows.append([name, d, plan.label, f"{bf16['tokens_per_s']:,.0f}",
                         "n/a" if r is None else f"{r['tokens_per_s']:,.0f}",
                         "n/a" if speed[(d, mname)] is None else f"{speed[(d, mname)]:.2f}x",
                         "n/a" if r is None else pct(r["mfu"])])
    body = [
        "Each size runs the fastest bf16 plan of section 4 (same server, same batch) again in FP8 "
        "(Transformer Engine style: FP8 GEMMs at the catalog's measured FP8 efficiency, casts of the inputs, "
        "attention in 16-bit). MFU in FP8 is against the FP8 peak.",
        "",
        md_table(["model", "server", "plan", "bf16 tokens/s", "FP8 tokens/s", "FP8 speed-up", "FP8 MFU"], rows,
                 "lllrrrr"),
    ]
    return Section("fp8", "FP8 on the H100 (and the 4090)", [
        "The H100 includes specialized hardware called the Transformer Engine, which dynamically adjusts "
        "precision between FP16, BF16, and FP8 formats during transformer model training. This feature doesn't "
        "exist on the RTX 4090, making the H100 substantially more efficient for language model work. [...] The "
        "H100's FP8 computational efficiency is six times that of the A100. [...] The RTX 4090 lacks native FP8 "
        "support at the hardware level. *(RTX 4090 vs H100)*"], verdict, body,
        [("fp8.png", "FP8 speed-up against model size; H100 against A100")], "scenarios/claims/fp8/*.yaml",
        ["scalesim compare scenarios/claims/fp8/8xh100-bf16.yaml scenarios/claims/fp8/8xh100-fp8.yaml "
         "scenarios/claims/fp8/8xa100-bf16.yaml"])


# ----------------------------------------------------------------------------- 7. cost per performance

COST_GPUS = ["rtx3090", "rtx4090", "rtx5090", "l40s", "a100-40gb-pcie", "a100-80gb-sxm", "h100-pcie", "h100-sxm",
             "h200-sxm", "b200"]


def claim_cost_per_performance(ctx: Ctx) -> Section:
    s, f = load("cost-per-performance/1x4090.yaml")
    gpus = ctx.pick(COST_GPUS, ["rtx4090", "a100-80gb-sxm", "h100-sxm"])
    data = {}
    for g in gpus:
        node = {"name": f"1x-{g}", "gpu": g, "gpus": 1}
        r = result(vary(s, cluster={"node": node, "gpus": 1}), f)
        spec = get_gpu(g)
        data[g] = (spec, r)
    rows, per_dollar = [], {}
    for g in gpus:
        spec, r = data[g]
        peak = spec.peak_flop_per_s("bf16")
        price, hourly = spec.list_price_usd, spec.cloud_usd_per_gpu_hour
        achieved = None if r is None else r["tflops_per_gpu"] * 1e12
        gf_list = None if achieved is None or not price else achieved / 1e9 / price
        tok_per_usd = None if r is None or not hourly else r["tokens_per_s"] * 3600 / hourly / 1e6
        per_dollar[g] = (gf_list, tok_per_usd, None if not price else peak / 1e9 / price)
        rows.append([g, f"{peak / 1e12:.0f}", "n/a" if r is None else f"{r['tflops_per_gpu']:.0f}",
                     "n/a" if r is None else pct(r["mfu"]), money(price) if price else "n/a",
                     "n/a" if not price else f"{peak / 1e9 / price:.0f}",
                     "n/a" if gf_list is None else f"{gf_list:.0f}",
                     money(hourly) if hourly else "n/a", "n/a" if tok_per_usd is None else f"{tok_per_usd:,.0f}"])

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    have = [g for g in gpus if per_dollar[g][0] is not None]
    ax1.barh(have, [per_dollar[g][2] for g in have], color=COLOURS[7], label="datasheet peak")
    ax1.barh(have, [per_dollar[g][0] for g in have], color=COLOURS[0], label="simulated, training")
    ax1.axvspan(50, 100, color=COLOURS[1], alpha=0.15, label="claimed 4090 range", zorder=0)
    ax1.axvspan(10, 50, color=COLOURS[2], alpha=0.15, label="claimed H100 range", zorder=0)
    ax1.invert_yaxis()
    ax1.set_xlabel("bf16 GFLOP/s per purchase dollar")
    ax1.set_title("Per dollar of purchase (list price)")
    ax1.legend(fontsize=7)
    have2 = [g for g in gpus if per_dollar[g][1] is not None]
    ax2.barh(have2, [per_dollar[g][1] for g in have2], color=COLOURS[0])
    ax2.invert_yaxis()
    ax2.set_xlabel("million tokens trained per rented dollar")
    ax2.set_title("Per dollar of rent (catalog GPU-hour)")
    fig.tight_layout()
    save(fig, ctx.plots / "cost-per-performance.png", ctx.written)

    g4, gh = per_dollar["rtx4090"], per_dollar["h100-sxm"]
    rent = sorted(have2, key=lambda g: -per_dollar[g][1])
    buy = sorted(have, key=lambda g: -per_dollar[g][0])
    inside = lambda v, lo, hi: "inside" if lo <= v <= hi else "outside"  # noqa: E731
    head = ("True per purchase dollar" if g4[0] > gh[0] else "False per purchase dollar") + (
        f"; per rented dollar the 4090 leads by less ({g4[1] / gh[1]:.1f}x)." if g4[1] > gh[1] else
        "; per rented dollar the H100 leads.")
    tok4, tokh = data["rtx4090"][1]["tokens_per_s"], data["h100-sxm"][1]["tokens_per_s"]
    p4, ph = data["rtx4090"][0].cloud_usd_per_gpu_hour, data["h100-sxm"][0].cloud_usd_per_gpu_hour
    flip = (f" Per rented dollar the two break even at an H100 SXM price of {money(tokh / tok4 * p4)} an hour "
            f"(catalog {money(ph)}), or a 4090 price of {money(tok4 / tokh * ph)} (catalog {money(p4)}).")
    verdict = (f"**{head}** Simulated training throughput per list dollar: RTX 4090 {g4[0]:.0f} GFLOP/s per $ "
               f"({inside(g4[0], 50, 100)} the claimed 50-100), H100 SXM {gh[0]:.0f} ({inside(gh[0], 10, 50)} the "
               f"claimed 10-50), a factor {g4[0] / gh[0]:.1f}. Rented at catalog prices the factor is "
               f"{g4[1] / gh[1]:.1f} in tokens per dollar. Best per purchase dollar: {buy[0]} (then {buy[1]}); per "
               f"rented dollar: {rent[0]} (then {rent[1]}).{flip} This is one card and a model that fits it; section 4 "
               f"finds where 8-GPU servers change the ranking. The 4090's simulated MFU "
               f"({pct(data['rtx4090'][1]['mfu'])}) "
               f"is above what training usually reaches, so its lead is an upper bound.")
    body = [
        f"One GPU trains the same model (a {fmt_params(params_of(s))} Llama-shaped transformer, micro-batch "
        f"{s.training.micro_batch} of {s.training.seq_len:,} tokens, {s.training.activation_checkpointing} recompute, "
        "so that it fits 24 GB); *achieved* is scalesim's model FLOP/s for it. Purchase "
        "is the catalog list price" + (f" (none for {', '.join(g for g in gpus if not data[g][0].list_price_usd)})"
                                       if any(not data[g][0].list_price_usd for g in gpus) else "")
        + ", rent the catalog's typical GPU-hour price; "
        "both are indicative (`scalesim hardware NAME` gives the sources).",
        "",
        md_table(["GPU", "peak bf16 TFLOP/s", "achieved TFLOP/s", "MFU", "list price", "peak GFLOP/s per $",
                  "achieved GFLOP/s per $", "$/GPU-hour", "M tokens per rented $"], rows, "lrrrrrrrr"),
    ]
    return Section("cost-per-performance", "Performance per dollar", [
        "The RTX 4090 delivers approximately 50-100 GFLOPS per dollar depending on precision and workload. The "
        "H100 delivers roughly 10-50 GFLOPS per dollar. For pure compute throughput, the RTX 4090 appears more "
        "economical. *(RTX 4090 vs H100)*"], verdict, body,
        [("cost-per-performance.png", "GFLOP/s per purchase dollar and tokens per rented dollar by GPU")],
        "scenarios/claims/cost-per-performance/*.yaml",
        ["scalesim compare scenarios/claims/cost-per-performance/*.yaml"])


# ----------------------------------------------------------------------------- 8. vision vs language

VISION_MODELS = [("resnet50", 256), ("vit-b16", 128), ("vit-l16", 128), ("gpt2-124m", 16), ("gpt2-350m", 16)]
COUNTS = (1, 2, 4, 8, 16, 32)


def claim_vision_vs_language(ctx: Ctx) -> Section:
    designs = [(load("vision-vs-language/32x4090-4nodes.yaml"), "4090 servers, 100 GbE"),
               (load("vision-vs-language/32xa100-4nodes.yaml"), "DGX A100, IB HDR")]
    models = ctx.pick(VISION_MODELS, [VISION_MODELS[0], VISION_MODELS[3]])
    counts = ctx.pick(COUNTS, (1, 8, 16))
    gpus = max(counts)
    (s4090, f4090), _ = designs[0]
    curves, micro, language = {}, {}, {}
    for m, cap in models:
        language[m] = get_model(m, seq_len=None).tokens_per_sample is not None
        training = {"epochs": None, "dataset_samples": None, "tokens": 1.0e10, "optimizer": "adamw"} \
            if language[m] else {}
        # The largest power-of-two micro-batch (up to the cap) that fits the 24 GB card, for both designs.
        mb = cap
        while mb > 1 and not fits(vary(s4090, model=m, training={**training, "micro_batch": mb,
                                                                  "global_batch": mb * gpus}), f4090):
            mb //= 2
        micro[m] = (mb, training)
    for (s, f), dname in designs:
        for m, _ in models:
            mb, training = micro[m]
            sc = vary(s, model=m, training={**training, "micro_batch": mb, "global_batch": mb * gpus},
                      cluster={"nodes": math.ceil(gpus / 8), "gpus": gpus})
            r = result(sc, f, scaling=tuple(counts))
            curves[(dname, m)] = {p["gpus"]: p["scaling_efficiency"] for p in r["scaling"]} if r else {}

    fig, axes = plt.subplots(1, len(designs), figsize=(11, 4.2), sharey=True)
    for ax, (_, dname) in zip(axes, designs):
        for i, (m, _) in enumerate(models):
            c = curves[(dname, m)]
            ax.plot(list(c), [100 * v for v in c.values()], marker="o", color=COLOURS[i],
                    linestyle="--" if language[m] else "-", label=m)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(counts), [str(c) for c in counts])
        ax.axvline(8.5, color="grey", linewidth=0.8)
        ax.text(9, 5, "across nodes ->", fontsize=8, color="grey")
        ax.set_ylim(0, 105)
        ax.set_xlabel("GPUs")
        ax.set_title(dname)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("scaling efficiency (%, solid: vision, dashed: language)")
    fig.tight_layout()
    save(fig, ctx.plots / "vision-vs-language.png", ctx.written)

    labels = [f"{c} GPU{'s' if c > 1 else ''}" for c in counts]
    rows, notes = [], []
    for (_, dname) in designs:
        for m, _ in models:
            c = curves[(dname, m)]
            spec = get_model(m, seq_len=None)
            text, j = crossover(labels, [c.get(k) for k in counts], 0.90)
            rows.append([dname, m, "language" if language[m] else "vision", str(micro[m][0]),
                         f"{spec.params / (spec.model_flop_per_sample * micro[m][0] / 1e9):,.0f}"]
                        + [pct(c.get(k)) for k in counts] + [text])
            if dname == designs[0][1]:
                notes.append(f"{m} {text}")
    d4090, dnv = designs[0][1], designs[1][1]
    in_node = max(k for k in counts if k <= 8)
    at = lambda d, kind, k: [curves[(d, m)].get(k) for m, _ in models if language[m] == kind]  # noqa: E731
    vis8, lang8 = at(d4090, False, in_node), at(d4090, True, in_node)
    visN, langN = at(d4090, False, gpus), at(d4090, True, gpus)
    last = {m: curves[(d4090, m)].get(gpus) for m, _ in models}
    best = max(last, key=lambda m: (last[m] or 0))
    vision = [m for m, _ in models if not language[m]]
    worst_vision = min(vision, key=lambda m: (last[m] or 0)) if vision else None
    all8 = [curves[(d4090, m)].get(in_node) for m, _ in models]
    if vision and len(vision) < len(models) and min(vis8) > max(lang8) and min(visN) > max(langN):
        head = "True: on 4090s the vision models scale better than the language models."
    elif worst_vision and min(visN) <= max(langN):
        head = (f"Partly: {best} scales best on 4090s, but {worst_vision} scales no better than the language "
                f"models across servers; within one server every model keeps {span(all8)}.")
    else:
        head = f"Partly: within one server every model keeps {span(all8)}; across servers they part ways."
    nv_all = [v for (d, _), c in curves.items() if d == dnv for v in c.values()]
    # Why efficiency drops from 2 to 4 servers: the all-reduce's bus bandwidth on that fabric.
    from scalesim.app.collective_bench import time_collective
    from scalesim.topology import build_cluster, load_node_design

    fab = s4090.cluster.fabric
    bench = []
    for nodes in (2, max(2, math.ceil(gpus / 8))):
        topo = build_cluster(load_node_design(s4090.cluster.node), nodes=nodes,
                             fabric=fab.as_fabric())
        row = time_collective(topo, "all_reduce", 8 * nodes, 256 * 2**20)
        bench.append(f"{nodes} servers {row.busbw_GBps:.1f} GB/s ({row.algo})")
    verdict = (f"**{head}** In one server of {in_node} RTX 4090s the vision models keep {span(vis8)} scaling "
               f"efficiency, the language models {span(lang8)}; at {gpus} GPUs over one {fab.link} NIC per server, "
               f"vision {span(visN)}, language {span(langN)}. Below 90%: " + "; ".join(notes)
               + f". The DGX A100s with InfiniBand keep {span(nv_all)} everywhere on the grid.")
    body = [
        "Data parallel (DDP), weak scaling: the same per-GPU micro-batch at every count (mb: the largest power "
        "of two that fits the 24 GB card, images or sequences of 1,024 tokens), one micro-batch per step; "
        "1-8 GPUs in one server, 16 and 32 over the fabric. Efficiency is per-GPU throughput against one GPU. "
        "*Parameters per GFLOP* is the gradient each GPU must all-reduce per unit of its compute per step: "
        "the lower, the easier to hide, though when the gradients become ready matters too.",
        "",
        f"- Simulated all-reduce bus bandwidth of 256 MiB across the 4090 servers ({fab.link}, "
        f"{fab.nics_per_node} NIC per server): {'; '.join(bench)}.",
        "",
        md_table(["servers", "model", "kind", "mb", "parameters per GFLOP of a step"]
                 + labels + ["90% crossed"], rows, "lllrr" + "r" * len(counts) + "l"),
    ]
    return Section("vision-vs-language", "Vision vs language models across GPUs", [
        "For most computer vision work, such as ResNets, EfficientNets, and many ViTs, the 4090 is excellent. "
        "[...] It has excellent value [...] But it has limited VRAM and weak scaling across multiple GPUs. "
        "*(RTX 4090 vs A100)*"], verdict, body,
        [("vision-vs-language.png", "scaling efficiency against GPU count, vision and language models")],
        "scenarios/claims/vision-vs-language/*.yaml",
        ["scalesim run scenarios/claims/vision-vs-language/32x4090-4nodes.yaml"])


# ----------------------------------------------------------------------------- registry

CLAIMS: list[tuple[str, Callable[[Ctx], Section]]] = [
    ("pcie-vs-nvlink", claim_pcie_vs_nvlink),
    ("fit-24gb", claim_fit_24gb),
    ("memory-techniques", claim_memory_techniques),
    ("small-vs-large", claim_small_vs_large),
    ("bandwidth-vs-memory", claim_bandwidth_vs_memory),
    ("fp8", claim_fp8),
    ("cost-per-performance", claim_cost_per_performance),
    ("vision-vs-language", claim_vision_vs_language),
]


INTRO = """# Buyer's-guide claims, tested with scalesim

<!-- Generated by docs/build_claims.py from scenarios/claims/; do not edit by hand. -->

Two buyer's-guide articles (RTX 4090 vs A100, RTX 4090 vs H100) make claims of the kind people
bring to scalesim. Each section below turns one claim into scenario files (`scenarios/claims/`),
sweeps the parameter the answer depends on, and reports the verdict with the crossover the
simulation finds. A crossover "between A and B" means A is the last point of the grid on one
side and B the first on the other: the grid's resolution, not a finer claim. Every number and
plot on this page comes from running scalesim (`python3 docs/build_claims.py` rebuilds it); the
articles' own figures are not used (several are wrong, see `shared/reference`).

How the points are simulated: scalesim's library API (`scalesim.app.run`), one optimizer step
per point, symmetric ranks simulated once; prices, power and failure rates are the catalog's
defaults (`scalesim hardware`), so costs are indicative. Where a claim needs a model size the
zoo lacks, the size comes from a ladder of Llama-shaped transformers (SwiGLU, 128-wide heads,
32k vocabulary; Llama 2 7B, 13B and 70B from the zoo, the 70B with grouped-query attention):
"""


def ladder_table() -> str:
    rows = []
    for name, spec, params in _ladder():
        if isinstance(spec, str):
            m = get_model(spec, seq_len=2048)
            shape = f"{m.num_layers} x {m.hidden} (zoo)"
        else:
            shape = f"{spec['layers']} x {spec['hidden']}"
        rows.append([name, shape, fmt_params(params)])
    return md_table(["model", "layers x hidden", "parameters"], rows, "lrr")


@contextlib.contextmanager
def symmetric_simulation():
    """One rank per pipeline stage stands for its symmetric peers at every GPU count.

    The runner does this beyond 16 GPUs; on 8 GPUs the step times are identical (the suite
    checks it) and 5-10x cheaper to get. Restored afterwards, so importing this file changes
    nothing.
    """
    saved = runner.FULL_SIMULATION_MAX_GPUS
    runner.FULL_SIMULATION_MAX_GPUS = 0
    try:
        yield
    finally:
        runner.FULL_SIMULATION_MAX_GPUS = saved


def build(out: Path, *, quick: bool = False, only: list[str] | None = None, log=print) -> list[Path]:
    """Run the claims and write <out>/claims.md and <out>/claims/*.png; returns the files written."""
    with symmetric_simulation():
        return _build(out, quick=quick, only=only, log=log)


def _build(out: Path, *, quick: bool, only: list[str] | None, log) -> list[Path]:
    plots = out / PLOT_DIR
    plots.mkdir(parents=True, exist_ok=True)
    _CACHE.clear()                     # every build simulates afresh (the test checks repeatability)
    if not only:                       # a whole page: no plots of claims that are gone
        for stale in plots.glob("*.png"):
            stale.unlink()
    ctx = Ctx(quick=quick, plots=plots)
    sections = []
    for claim_id, fn in CLAIMS:
        if only and claim_id not in only:
            continue
        start = time.perf_counter()
        sections.append(fn(ctx))
        log(f"{claim_id}: {time.perf_counter() - start:.1f} s")
    parts = [INTRO, ladder_table(), ""]
    if quick:
        parts += ["*Quick build: reduced grids, for tests; the crossovers below are coarser than the full page's.*", ""]
    parts += ["## Summary", "", md_table(["claim", "verdict"], [
        [f"[{i}. {s.title}](#{s.id})", s.verdict.split("**")[1] if s.verdict.startswith("**") else s.verdict]
        for i, s in enumerate(sections, 1)], "ll"), ""]
    parts += [s.markdown(i) for i, s in enumerate(sections, 1)]
    page = out / "claims.md"
    page.write_text("\n".join(parts).rstrip() + "\n")
    return [page] + ctx.written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DOCS, help="directory for claims.md and claims/ [docs/]")
    parser.add_argument("--quick", action="store_true", help="reduced grids (seconds, for tests)")
    parser.add_argument("--only", help="comma-separated claim ids: " + ", ".join(c for c, _ in CLAIMS))
    args = parser.parse_args(argv)
    only = [c.strip() for c in args.only.split(",")] if args.only else None
    unknown = [c for c in only or [] if c not in dict(CLAIMS)]
    if unknown:
        parser.error(f"unknown claim {', '.join(unknown)}; allowed: {', '.join(c for c, _ in CLAIMS)}")
    if (args.quick or only) and args.out.resolve() == DOCS.resolve():
        parser.error("--quick and --only write a partial page: give --out DIR (not docs/)")
    start = time.perf_counter()
    for path in build(args.out, quick=args.quick, only=only, log=lambda m: print(m, file=sys.stderr)):
        print(path)
    print(f"built in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
