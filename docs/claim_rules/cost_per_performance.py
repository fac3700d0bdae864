"""7. Performance per dollar: one GPU of each kind trains the same model; per purchase and rented dollar."""

from __future__ import annotations

from claim_rules.common import Ctx, fmt_params, md_table, money, pct

from scalesim.app.claims import params_of
from scalesim.hardware import get_gpu
from scalesim.report.claim_plots import cost_plot


def _row(g: str, spec, r: dict | None) -> tuple[tuple, list[str]]:
    """(GFLOP/s per list $, M tokens per rented $, peak GFLOP/s per list $) and the table row of one GPU."""
    peak = spec.peak_flop_per_s("bf16")
    price, hourly = spec.list_price_usd, spec.cloud_usd_per_gpu_hour
    achieved = None if r is None else r["tflops_per_gpu"] * 1e12
    gf_list = None if achieved is None or not price else achieved / 1e9 / price
    tok_per_usd = None if r is None or not hourly else r["tokens_per_s"] * 3600 / hourly / 1e6
    row = [g, f"{peak / 1e12:.0f}", "n/a" if r is None else f"{r['tflops_per_gpu']:.0f}",
           "n/a" if r is None else pct(r["mfu"]), money(price) if price else "n/a",
           "n/a" if not price else f"{peak / 1e9 / price:.0f}", "n/a" if gf_list is None else f"{gf_list:.0f}",
           money(hourly) if hourly else "n/a", "n/a" if tok_per_usd is None else f"{tok_per_usd:,.0f}"]
    return (gf_list, tok_per_usd, None if not price else peak / 1e9 / price), row


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    s, f = ctx.load(spec["scenarios"][0]["file"])
    gpus = ctx.grid(spec, "gpus")
    data = {g: (get_gpu(g), ctx.sims.result(s.with_changes(cluster={"node": {"name": f"1x-{g}", "gpu": g, "gpus": 1},
                                                                     "gpus": 1}), f)) for g in gpus}
    per_dollar, rows = {}, []
    for g in gpus:
        per_dollar[g], row = _row(g, *data[g])
        rows.append(row)
    have = [g for g in gpus if per_dollar[g][0] is not None]
    have2 = [g for g in gpus if per_dollar[g][1] is not None]
    claimed = spec["claimed"]
    cost_plot(ctx.plot(ctx.plots / "cost-per-performance.png"),
              {g: (per_dollar[g][2], per_dollar[g][0]) for g in have}, {g: per_dollar[g][1] for g in have2},
              {"claimed 4090 range": claimed["rtx4090"], "claimed H100 range": claimed["h100-sxm"]})
    g4, gh = per_dollar["rtx4090"], per_dollar["h100-sxm"]
    rent = sorted(have2, key=lambda g: -per_dollar[g][1])
    buy = sorted(have, key=lambda g: -per_dollar[g][0])

    def inside(v, gpu):
        return "inside" if claimed[gpu][0] <= v <= claimed[gpu][1] else "outside"

    head = ("True per purchase dollar" if g4[0] > gh[0] else "False per purchase dollar") + (
        f"; per rented dollar the 4090 leads by less ({g4[1] / gh[1]:.1f}x)." if g4[1] > gh[1] else
        "; per rented dollar the H100 leads.")
    tok4, tokh = data["rtx4090"][1]["tokens_per_s"], data["h100-sxm"][1]["tokens_per_s"]
    p4, ph = data["rtx4090"][0].cloud_usd_per_gpu_hour, data["h100-sxm"][0].cloud_usd_per_gpu_hour
    flip = (f" Per rented dollar the two break even at an H100 SXM price of {money(tokh / tok4 * p4)} an hour "
            f"(catalog {money(ph)}), or a 4090 price of {money(tok4 / tokh * ph)} (catalog {money(p4)}).")
    verdict = (f"**{head}** Simulated training throughput per list dollar: RTX 4090 {g4[0]:.0f} GFLOP/s per $ "
               f"({inside(g4[0], 'rtx4090')} the claimed 50-100), H100 SXM {gh[0]:.0f} ({inside(gh[0], 'h100-sxm')} "
               f"the claimed 10-50), a factor {g4[0] / gh[0]:.1f}. Rented at catalog prices the factor is "
               f"{g4[1] / gh[1]:.1f} in tokens per dollar. Best per purchase dollar: {buy[0]} (then {buy[1]}); per "
               f"rented dollar: {rent[0]} (then {rent[1]}).{flip} This is one card and a model that fits it; section 4 "
               f"finds where 8-GPU servers change the ranking. The 4090's simulated MFU "
               f"({pct(data['rtx4090'][1]['mfu'])}) "
               f"is above what training usually reaches, so its lead is an upper bound.")
    unpriced = [g for g in gpus if not data[g][0].list_price_usd]
    body = [
        f"One GPU trains the same model (a {fmt_params(params_of(s))} Llama-shaped transformer, micro-batch "
        f"{s.training.micro_batch} of {s.training.seq_len:,} tokens, {s.training.activation_checkpointing} recompute, "
        "so that it fits 24 GB); *achieved* is scalesim's model FLOP/s for it. Purchase "
        "is the catalog list price" + (f" (none for {', '.join(unpriced)})" if unpriced else "")
        + ", rent the catalog's typical GPU-hour price; "
        "both are indicative (`scalesim hardware NAME` gives the sources).",
        "",
        md_table(["GPU", "peak bf16 TFLOP/s", "achieved TFLOP/s", "MFU", "list price", "peak GFLOP/s per $",
                  "achieved GFLOP/s per $", "$/GPU-hour", "M tokens per rented $"], rows, "lrrrrrrrr"),
    ]
    return verdict, body
