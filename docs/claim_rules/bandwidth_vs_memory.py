"""5. Bandwidth or memory: the H200 (H100 compute, more bandwidth and memory) against the H100."""

from __future__ import annotations

from claim_rules.common import Ctx, md_table, pct, span

from scalesim.app.claims import SearchSpace, apply, plan_label
from scalesim.hardware import get_gpu
from scalesim.report.claim_plots import bandwidth_memory_plot


def simulate(ctx: Ctx, spec: dict, models: list[str], micro: list[int]) -> dict:
    """(model, micro-batch) -> (H100 plan, H200 plan, H100 s, H200 s with the H100's plan, H200 s own plan)."""
    (h100, f100), (h200, f200) = (ctx.load(d["file"]) for d in spec["scenarios"])
    data = {}
    for m in models:
        for mb in micro:
            space = SearchSpace.of({**spec["plan"], "micro": [mb]})
            p100 = ctx.sims.best_plan(h100.with_changes(model=m), f100, space)
            p200 = ctx.sims.best_plan(h200.with_changes(model=m), f200, space)
            same = None if p100 is None else ctx.sims.step_time(apply(h200.with_changes(model=m), p100[0]), f200)
            data[(m, mb)] = (p100, p200, None if p100 is None else p100[2], same, None if p200 is None else p200[2])
    return data


def _gains(v: tuple) -> tuple[float | None, float | None]:
    """Bandwidth gain (same plan) and memory gain (the H200's own plan); None when nothing fits the H100."""
    _, _, t100, same, own = v
    if t100 is None:
        return None, None
    return t100 / same - 1, same / own - 1


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    models, micro = ctx.grid(spec, "models"), ctx.grid(spec, "micro")
    data = simulate(ctx, spec, models, micro)
    gains = {key: _gains(v) for key, v in data.items()}
    bandwidth_memory_plot(ctx.plot(ctx.plots / "bandwidth-vs-memory.png"), micro,
                          {m: [gains[(m, mb)] for mb in micro] for m in models})
    rows, mem_where = [], []
    for m in models:
        for mb in micro:
            p100, p200, t100, same, own = data[(m, mb)]
            rows.append([m, str(mb), "does not fit" if p100 is None else plan_label(p100[0]),
                         "does not fit" if p200 is None else plan_label(p200[0]),
                         "n/a" if t100 is None else f"{t100:.2f}", "n/a" if same is None else f"{same:.2f}",
                         "n/a" if own is None else f"{own:.2f}", pct(gains[(m, mb)][0], 1), pct(gains[(m, mb)][1], 1)])
        ahead = [mb for mb in micro if None not in gains[(m, mb)] and gains[(m, mb)][1] > gains[(m, mb)][0]]
        mem_where.append(f"{m} at micro-batch {', '.join(map(str, ahead))}" if ahead else f"{m} at no micro-batch")
    best100 = {m: min((data[(m, mb)][2], mb) for mb in micro if data[(m, mb)][2] is not None) for m in models}
    best200 = {m: min((data[(m, mb)][4], mb) for mb in micro if data[(m, mb)][4] is not None) for m in models}
    overall = [best100[m][0] / best200[m][0] - 1 for m in models]
    largest = [gains[(m, micro[-1])] for m in models]
    g100, g200 = get_gpu("h100-sxm"), get_gpu("h200-sxm")
    verdict = _verdict(g100, g200, overall, largest, [g[0] for g in gains.values()], [g[1] for g in gains.values()],
                       mem_where)
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
    return verdict, body


def _verdict(g100, g200, overall, largest, bw_all, mem_all, mem_where) -> str:
    bw_wins_large = all(None not in g and g[0] >= g[1] for g in largest)
    small = max(overall) < 0.10
    head = ("Neither buys much for training; at large micro-batches bandwidth is the larger of the two."
            if small and bw_wins_large else
            "Neither buys much for training." if small else
            "Bandwidth matters more at large micro-batches." if bw_wins_large else
            "Memory matters more at large micro-batches.")
    return (f"**{head}** The H200 has the H100's compute ({g200.peak_flop_per_s('bf16') / 1e12:.0f} dense bf16 "
            f"TFLOP/s) with {g200.memory_bw_bytes_per_s / g100.memory_bw_bytes_per_s:.2f}x the bandwidth and "
            f"{g200.memory_bytes / g100.memory_bytes:.2f}x the memory. "
            f"Bandwidth alone (same plan) buys {span(bw_all, lambda v: pct(v, 1))} at every micro-batch: "
            f"large-batch training is compute-bound. Memory buys {span([v for v in mem_all if v], pct)} where "
            f"it spares the recompute the H100 needs ({'; '.join(mem_where)}) and nothing elsewhere. Best "
            f"against best over the micro-batches, the H200 is {span(overall, pct)} faster, because the H100 "
            f"reaches nearly the same speed with a micro-batch that fits without recompute. (The article said "
            f"this of inference, which scalesim does not simulate.)")
