"""6. FP8: each size's fastest bf16 plan of section 4 run again in FP8."""

from __future__ import annotations

from claim_rules.common import Ctx, claim_spec, crossover, fmt_params, md_table, pct, span, times
from claim_rules.small_vs_large import size_sweep

from scalesim.app.claims import apply, plan_label
from scalesim.hardware import get_gpu
from scalesim.report.claim_plots import fp8_plot

BODY = ("Each size runs the fastest bf16 plan of section 4 (same server, same batch) again in FP8 "
        "(Transformer Engine style: FP8 GEMMs at the catalog's measured FP8 efficiency, casts of the inputs, "
        "attention in 16-bit). MFU in FP8 is against the FP8 peak.")


def simulate(ctx: Ctx, spec: dict, rungs, sweep: dict) -> tuple[dict, dict]:
    """FP8 / bf16 throughput per (server, model), and the FP8 runs."""
    speed, fp8_runs = {}, {}
    per_param = claim_spec("small-vs-large")["tokens_per_param"]
    for entry in spec["scenarios"]:
        d = entry["label"]
        s, f = ctx.load(entry["file"])
        for mname, model, params in rungs:
            got = sweep[(d, mname)]
            if got is None:
                speed[(d, mname)] = None
                continue
            budget = {"tokens": float(per_param * round(params, -6))}
            r = ctx.sims.result(apply(s.with_changes(model=model, training=budget), got[0]), f)
            fp8_runs[(d, mname)] = r
            speed[(d, mname)] = None if r is None else r["tokens_per_s"] / got[1]["tokens_per_s"]
    return speed, fp8_runs


def _ratio(a: dict | None, b) -> float | None:
    return None if a is None or b is None else a["tokens_per_s"] / b[1]["tokens_per_s"]


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    rungs = ctx.rungs(ctx.grid(claim_spec("small-vs-large"), "models"))
    names, xs = [fmt_params(p) for _, _, p in rungs], [p for _, _, p in rungs]
    sweep = size_sweep(ctx)      # the bf16 plans of section 4 (simulated once per build)
    servers = [d["label"] for d in spec["scenarios"]]
    speed, fp8_runs = simulate(ctx, spec, rungs, sweep)
    a100 = [sweep[("8x A100", m)] for m, _, _ in rungs]
    vs_a100 = [_ratio(fp8_runs.get(("8x H100", m)), a) for (m, _, _), a in zip(rungs, a100)]
    h_bf16_vs_a100 = [None if sweep[("8x H100", m)] is None else _ratio(sweep[("8x H100", m)][1], a)
                      for (m, _, _), a in zip(rungs, a100)]
    gh100, g4090 = get_gpu("h100-sxm"), get_gpu("rtx4090")
    fp8_plot(ctx.plot(ctx.plots / "fp8.png"), xs, {d: [speed[(d, m)] for m, _, _ in rungs] for d in servers},
             gh100.peak_flop_per_s("fp8") / gh100.peak_flop_per_s("bf16"),
             {"8x H100 FP8 / 8x A100 bf16": vs_a100, "8x H100 bf16 / 8x A100 bf16": h_bf16_vs_a100},
             spec["claimed_vs_a100"])
    hs = [speed[("8x H100", m)] for m, _, _ in rungs]
    gs = [speed[("8x 4090", m)] for m, _, _ in rungs]
    h_text, h_j = crossover(names, hs, spec["speedup_threshold"])
    g_peak = max((v, n) for v, n in zip(gs, names) if v is not None)
    ratio = max(v for v in vs_a100 if v is not None)
    head = ("True in direction, overstated in size" if max(v for v in hs if v) < 1.8 else "True") + (
        f": FP8 gives the H100 {span(hs, times)}, and {span(vs_a100, lambda v: f'{v:.1f}x')} an A100, "
        f"not 6x." if ratio < 5 else ".")
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
    for (mname, _, _), name in zip(rungs, names):
        for d in servers:
            got, r, sp = sweep[(d, mname)], fp8_runs.get((d, mname)), speed[(d, mname)]
            rows.append([name, d, "does not fit", "", "", "", ""] if got is None else [
                name, d, plan_label(got[0]), f"{got[1]['tokens_per_s']:,.0f}",
                "n/a" if r is None else f"{r['tokens_per_s']:,.0f}", "n/a" if sp is None else f"{sp:.2f}x",
                "n/a" if r is None else pct(r["mfu"])])
    return verdict, [BODY, "", md_table(["model", "server", "plan", "bf16 tokens/s", "FP8 tokens/s",
                                         "FP8 speed-up", "FP8 MFU"], rows, "lllrrrr")]
