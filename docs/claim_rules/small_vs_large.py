"""4. Small models on 4090s, large ones on A100/H100: the fastest plan per size and server, costed."""

from __future__ import annotations

from claim_rules.common import Ctx, claim_spec, crossover, days, fmt_params, md_table, money, pct

from scalesim.app.claims import SearchSpace, plan_label
from scalesim.report.claim_plots import size_plot


def size_sweep(ctx: Ctx, precision: str | None = None) -> dict:
    """Best plan and its run for each design and ladder model: {(design, model): (plan, run json) or None}."""
    spec = claim_spec("small-vs-large")
    space = SearchSpace.of({**spec["plan"], **(spec["plan_quick"] if ctx.quick else {})})
    out = {}
    for entry in spec["scenarios"]:
        s, f = ctx.load(entry["file"])
        for mname, model, params in ctx.rungs(ctx.grid(spec, "models")):
            training = {"tokens": float(spec["tokens_per_param"] * round(params, -6))}
            if precision:
                training["precision"] = precision
            found = ctx.sims.best_plan(s.with_changes(model=model, training=training), f, space)
            out[(entry["label"], mname)] = None if found is None else (found[0], ctx.sims.result(found[1], f))
    return out


def _cheaper_until(series: dict, rival: str, names: list[str]) -> tuple[str, int | None]:
    """Where the 8x 4090 stops being cheaper than `rival`, by the sign of the cost difference."""
    diff = [None if a is None or b is None else b - a for a, b in zip(series["8x 4090"], series[rival])]
    _, j = crossover(names, diff, 0.0)
    known = [v for v in diff if v is not None]
    if j is not None:
        cheaper_first = known[0] > 0
        side, other = ("cheaper", "dearer") if cheaper_first else ("dearer", "cheaper")
        return (f"the 8x 4090 is {side} than the {rival} up to {names[j - 1]} and {other} from {names[j]}",
                j if cheaper_first else None)
    if known and all(v > 0 for v in known):
        return f"the 8x 4090 is cheaper than the {rival} at every size both can train", len(names)
    return f"the 8x 4090 is dearer than the {rival} at every size on the grid", 0


def _cheapest_until(label: str, j: int | None, names: list[str], xs: list[float]) -> str:
    if j is None or j == 0:
        return f"{label}, the 8x 4090 is never the cheapest"
    if j >= len(names):
        return f"{label}, the 8x 4090 is the cheapest at every size on the grid"
    lo, hi = xs[j - 1], xs[j]
    versus = ("which brackets the articles' 7B" if lo < 7e9 <= hi else
              "above the articles' 7B" if lo >= 7e9 else "below the articles' 7B")
    return f"{label}, the 8x 4090 is the cheapest up to {names[j - 1]} and no longer from {names[j]} ({versus})"


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    rungs = ctx.rungs(ctx.grid(spec, "models"))
    sweep = size_sweep(ctx)
    names, xs = [fmt_params(p) for _, _, p in rungs], [p for _, _, p in rungs]
    dnames = [d["label"] for d in spec["scenarios"]]

    def metric(fn) -> dict[str, list]:
        return {d: [None if sweep[(d, m)] is None else fn(sweep[(d, m)][1]) for m, _, _ in rungs] for d in dnames}

    cloud = metric(lambda r: r["economics"]["cloud"]["usd_per_million_tokens"])
    owned = metric(lambda r: r["economics"]["on_prem"]["usd_per_million_tokens"])
    ttt = metric(lambda r: r["time_to_train_s"])
    lines, ends = [], {}
    for label, series in (("renting", cloud), ("owning", owned)):
        parts = []
        for rival in ("8x A100", "8x H100"):
            text, ends[(label, rival)] = _cheaper_until(series, rival, names)
            parts.append(text)
        lines.append(f"{label.capitalize()}: " + "; ".join(parts) + ".")
    first = {label: min((v for (lab, _), v in ends.items() if lab == label and v is not None), default=None)
             for label in ("renting", "owning")}
    own = next(got[1]["economics"]["on_prem"] for got in sweep.values() if got is not None)
    size_plot(ctx.plot(ctx.plots / "small-vs-large.png"), xs, [
        (cloud, "cloud cost per million tokens (USD)", "renting (catalog GPU-hour prices)", first["renting"]),
        (owned, "owned cost per million tokens (USD)",
         f"owning ({own['amortisation_years']:g}-year amortisation + power)", first["owning"]),
        ({d: [None if v is None else v / 86400 for v in ttt[d]] for d in dnames},
         f"days to train {spec['tokens_per_param']} tokens per parameter", "wall time (failures included)", None)])
    verdict, limit = _verdict(cloud, ttt, ends, first, names, xs, dnames)
    findings = lines + [f"Fits at all: the 8x 4090 trains {limit} with the plans searched (ZeRO-3, recompute and "
                        f"CPU offload included)."]
    return verdict, _body(spec, own, findings, _rows(sweep, rungs, names, dnames))


def _verdict(cloud, ttt, ends, first, names, xs, dnames) -> tuple[str, str]:
    fits_4090 = [i for i, v in enumerate(cloud["8x 4090"]) if v is not None]
    last = fits_4090[-1] if fits_4090 else None
    limit = ("nothing" if last is None else f"up to {names[last]}" +
             (" (the end of the grid)" if last == len(names) - 1 else f" (not {names[last + 1]})"))
    speed = [b / a for a, b in zip(ttt["8x H100"], ttt["8x 4090"]) if a is not None and b is not None]
    if last is not None and xs[last] >= 20e9:
        at = [(cloud[d][last], d) for d in dnames if cloud[d][last] is not None]
        rank = sorted(at).index((cloud["8x 4090"][last], "8x 4090")) + 1
        big = (f"Their 20B does not need an H100 for memory: the 8x 4090 trains {limit} with ZeRO-3 and CPU "
               f"offload, at {money(cloud['8x 4090'][last])} per million tokens rented there (rank {rank} of "
               f"{len(at)}; cheapest: {min(at)[1]} at {money(min(at)[0])}).")
    else:
        big = f"The 8x 4090 trains {limit}."
    crossing = any(v is not None and 0 < v < len(names) for v in ends.values())
    head = "True for cost, false for time." if crossing else "Cheapest at every size on the grid, never fastest."
    renting = _cheapest_until("renting", first["renting"], names, xs)
    verdict = (f"**{head}** {renting[0].upper() + renting[1:]}; "
               f"{_cheapest_until('owning', first['owning'], names, xs)}. {big} By time the 8x H100 wins at every "
               f"size" + (f": the 8x 4090 takes {min(speed):.1f}x to {max(speed):.1f}x as long." if speed else "."))
    return verdict, limit


def _rows(sweep, rungs, names, dnames) -> list[list[str]]:
    rows = []
    for (mname, _, _), name in zip(rungs, names):
        for d in dnames:
            got = sweep[(d, mname)]
            if got is None:
                rows.append([name, d, "does not fit", "", "", "", "", ""])
                continue
            plan, r = got
            rows.append([name, d, plan_label(plan), f"{r['tokens_per_s']:,.0f}", pct(r["mfu"]),
                         days(r["time_to_train_s"]), money(r["economics"]["cloud"]["usd_per_million_tokens"]),
                         money(r["economics"]["on_prem"]["usd_per_million_tokens"])])
    return rows


def _body(spec: dict, own: dict, findings: list[str], rows: list[list[str]]) -> list[str]:
    return [
        f"Pre-training each ladder model on {spec['tokens_per_param']} tokens per parameter (Hoffmann et al. "
        "2022), 256 sequences of 2,048 tokens per step, on one 8-GPU server of each kind. For every size and server "
        "the build searches the plan (data parallel with ZeRO 0-3 and optimizer offload; tensor parallel 2/4/8; "
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
