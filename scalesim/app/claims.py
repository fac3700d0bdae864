"""The claims page's simulations: the runs a build owns (memoised on the build's own object) and
the plan search it runs through scalesim.app.plans.

A claim (docs/claims/<id>.yaml and its rules under docs/claim_rules/) asks for memory, a step
time or a whole `run --json` of scenario variants, and for the fastest plan that fits within a
restricted search space. Every step is simulated with one rank per pipeline stage standing for
its identical peers (`every_rank=False`), which the test suite checks against the full
simulation.

The search enumerates `PlanPoint`s and builds their scenarios with `scenario_for`, as `scalesim
sweep --search` does, over a smaller space (`SearchSpace`: the splits, ZeRO / offload levels,
recompute and micro-batches a claim allows). Its rule for "fits" is the memory model's own
(need <= capacity, no headroom): the page reports what the model says fits, where the sweep
keeps a margin for the model's error. For each split, ZeRO level and recompute it keeps the
largest micro-batch that fits (with a pipeline, the largest with at least 4 x pp micro-batches
per step, if one fits), drops plans another kept plan dominates, simulates the rest and keeps the
fastest step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesim.app.plans import RECOMPUTE, PlanPoint, scenario_for
from scalesim.app.run import run
from scalesim.app.setup import prepare, simulate_setup
from scalesim.errors import InputError
from scalesim.models import get_model
from scalesim.scenario import Scenario, load_scenario
from scalesim.topology import load_node_design

SHARDING = ((0, "none"), (1, "none"), (2, "none"), (3, "none"), (3, "optimizer"))   # (zero, offload) levels
SPLITS = ((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (1, 4))                           # (tp, pp)
MICRO = (16, 8, 4, 2, 1)


@dataclass(frozen=True)
class SearchSpace:
    """The plans a claim lets the search try, each axis in SHARDING's / RECOMPUTE's order."""

    splits: tuple[tuple[int, int], ...] = SPLITS
    micro: tuple[int, ...] = MICRO
    sharding: tuple[tuple[int, str], ...] = SHARDING
    recompute: tuple[str, ...] = RECOMPUTE

    @classmethod
    def of(cls, limits: dict | None = None) -> "SearchSpace":
        """A space from a claim spec's mapping (lists of lists), the full space for what it omits."""
        known = {k: tuple(tuple(v) if isinstance(v, list) else v for v in values)
                 for k, values in (limits or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


def plan_label(p: PlanPoint) -> str:
    """'tp2, ZeRO-3, offload, full recompute, mb 4' (DDP for plain data parallelism)."""
    parts = [f"tp{p.tp}"] if p.tp > 1 else []
    parts += [f"pp{p.pp}"] if p.pp > 1 else []
    parts += [f"ZeRO-{p.zero}"] if p.zero else ([] if parts else ["DDP"])
    parts += ["offload"] if p.offload != "none" else []
    parts += [f"{p.recompute} recompute"] if p.recompute != "none" else []
    return ", ".join(parts) + f", mb {p.micro_batch}"


def gpus_of(s: Scenario) -> int:
    if s.cluster.gpus:
        return s.cluster.gpus
    return load_node_design(s.cluster.node, key="cluster.node").gpus * s.cluster.nodes


def params_of(s: Scenario) -> float:
    return get_model(s.model, seq_len=s.training.seq_len).params


def load(root: Path, rel: str) -> tuple[Scenario, str]:
    """A claims scenario by its path under `root` (scenarios/claims/), named by that path in errors."""
    scenario, _ = load_scenario(root / rel)
    return scenario, f"scenarios/claims/{rel}"


def _point(gpus: int, tp: int, pp: int, sharding: tuple[int, str], recompute: str, micro_batch: int) -> PlanPoint:
    zero, offload = sharding
    return PlanPoint(gpus, gpus // (tp * pp), tp, pp, 1, zero, micro_batch, recompute, offload)


def apply(s: Scenario, point: PlanPoint) -> Scenario:
    """The scenario of one plan (sharding and offload set whether or not the base had them)."""
    base = s.with_changes(parallel={"offload_optimizer": False, "offload_params": False})
    return scenario_for(base, point)


def _dominates(a: PlanPoint, b: PlanPoint) -> bool:
    """Same split, no more sharding or recompute, no smaller micro-batch."""
    level = SHARDING.index
    return (a != b and (a.tp, a.pp) == (b.tp, b.pp) and level((a.zero, a.offload)) <= level((b.zero, b.offload))
            and RECOMPUTE.index(a.recompute) <= RECOMPUTE.index(b.recompute) and a.micro_batch >= b.micro_batch)


@dataclass
class Simulations:
    """What one build simulates, each variant once: memory, step time and `run --json` by scenario.

    `every_rank`: as `prepare`'s [False: one rank per pipeline stage for its identical peers].
    """

    every_rank: bool | None = False
    memo: dict[tuple, Any] = field(default_factory=dict)

    def _get(self, key: tuple, compute):
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def memory(self, s: Scenario, file: str | None) -> tuple[float, float] | None:
        """(bytes needed per GPU, capacity), or None when scalesim refuses the plan."""
        def compute():
            try:
                setup = prepare(s, file, every_rank=self.every_rank)
            except InputError:
                return None
            return setup.step.memory.total, setup.gpu.memory_bytes
        return self._get(("memory", s.model_dump_json()), compute)

    def fits(self, s: Scenario, file: str | None) -> bool:
        m = self.memory(s, file)
        return m is not None and m[0] <= m[1]

    def step_time(self, s: Scenario, file: str) -> float:
        """Simulated step time, whether or not the plan fits in memory (for what-if references)."""
        return self._get(("step", s.model_dump_json()),
                         lambda: simulate_setup(prepare(s, file, every_rank=self.every_rank)).end_s)

    def result(self, s: Scenario, file: str | None, *, baseline: bool = False, scaling: tuple[int, ...] = ()
               ) -> dict | None:
        """`scalesim run --json`'s object for a plan that fits (None when it does not)."""
        if not self.fits(s, file):
            return None
        return self._get(("run", s.model_dump_json(), baseline, scaling), lambda: run(
            s, file, baseline=baseline, scaling_counts=list(scaling) or None, every_rank=self.every_rank).to_json())

    def candidates(self, s: Scenario, file: str, space: SearchSpace = SearchSpace()) -> list[PlanPoint]:
        """Plans that fit and that no other fitting plan dominates (see the module docstring).
        ZeRO-2/3 and offload only without model parallelism (as DeepSpeed allows)."""
        gpus, batch = gpus_of(s), s.training.global_batch
        found: list[PlanPoint] = []
        for tp, pp in space.splits:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            lv = [v for v in space.sharding if (v[0] <= 1 and v[1] == "none") or tp == pp == 1]
            lv = [v for v in lv if dp > 1 or v[0] == 0]
            mbs = [m for m in space.micro if batch % (dp * m) == 0]
            if pp > 1:
                deep = [m for m in mbs if batch // (dp * m) >= 4 * pp]
                mbs = deep + [m for m in mbs if m not in deep]
            if not lv or not mbs:
                continue
            # The least memory this split can take; if that does not fit, nothing of the split does.
            lightest = _point(gpus, tp, pp, max(lv, key=SHARDING.index), max(space.recompute, key=RECOMPUTE.index),
                              min(mbs))
            if not self.fits(apply(s, lightest), file):
                continue
            for rc in space.recompute:
                for level in lv:
                    plan = next((p for p in (_point(gpus, tp, pp, level, rc, mb) for mb in mbs)
                                 if self.fits(apply(s, p), file)), None)
                    found += [plan] if plan is not None else []
        return [p for p in found if not any(_dominates(q, p) for q in found)]

    def best_plan(self, s: Scenario, file: str, space: SearchSpace = SearchSpace()
                  ) -> tuple[PlanPoint, Scenario, float] | None:
        """The fastest plan that fits (by simulated step time), or None when none fits."""
        best = None
        for plan in self.candidates(s, file, space):
            scenario = apply(s, plan)
            t = self.step_time(scenario, file)
            if best is None or t < best[2]:
                best = (plan, scenario, t)
        return best
