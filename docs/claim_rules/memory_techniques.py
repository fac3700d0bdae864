"""3. What memory-saving techniques cost: each applied to plain data parallelism on 8 GPUs."""

from __future__ import annotations

from claim_rules.common import GiB, Ctx, crossover, fmt_params, md_table, signed

from scalesim.report.claim_plots import techniques_plot

BODY = (
    "Each technique is applied to the same 8 GPUs, model and batch (64 sequences of 2,048 tokens, "
    "micro-batch 1) and compared with the step plain data parallelism would take if memory were unlimited "
    "(simulated regardless of fit). Memory and step times are scalesim's; *no* marks plans that do not "
    "fit the GPU. With micro-batch 1, ZeRO-3 gathers every layer's weights again for each of the 8 "
    "micro-batches of a step; larger micro-batches amortise that (section 4's plan search uses them). "
    "Plain data parallelism is PyTorch DDP under autocast, which all-reduces fp32 gradients; the ZeRO "
    "stages reduce 16-bit gradients as DeepSpeed does (`parallel.grad_reduce_dtype`), so where gradient "
    "traffic is the bottleneck (host-staged PCIe) a ZeRO stage can come out faster than the baseline: "
    "that gain is the gradient precision, not the sharding.")


def simulate(ctx: Ctx, spec: dict, models, techniques: list[dict]) -> dict:
    """(model, design, technique) -> (fits, GiB, step s, step over plain DDP)."""
    data = {}
    plain = spec["plain"]
    for mname, model, _ in models:
        for entry in spec["scenarios"]:
            s, f = ctx.load(entry["file"])
            ref_scenario = s.with_changes(model=model, parallel=plain["parallel"], training=plain["training"])
            ref = ctx.sims.step_time(ref_scenario, f)
            for t in [plain] + techniques:
                sc = ref_scenario.with_changes(parallel=t["parallel"], training=t["training"])
                m, step = ctx.sims.memory(sc, f), ctx.sims.step_time(sc, f)
                data[(mname, entry["label"], t["label"])] = (m[0] <= m[1], m[0] / GiB, step, step / ref - 1)
    return data


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    dnames = [d["label"] for d in spec["scenarios"]]
    models = ctx.rungs(ctx.grid(spec, "models"))
    quick = spec["techniques_quick"]
    techniques = [t for t in spec["techniques"] if not ctx.quick or t["label"] in quick]
    data = simulate(ctx, spec, models, techniques)
    labels = [spec["plain"]["label"]] + [t["label"] for t in techniques]
    techniques_plot(ctx.plot(ctx.plots / "memory-techniques.png"), [
        (f"{fmt_params(params)} ({mname}), 8 GPUs", labels,
         {d: [(data[(mname, d, lab)][0], data[(mname, d, lab)][3]) for lab in labels] for d in dnames})
        for mname, _, params in models])
    findings, rows, cheapest = [], [], {d: [] for d in dnames}
    for mname, _, params in models:
        for d in dnames:
            fitting = [(data[(mname, d, lab)][3], lab) for lab in labels if data[(mname, d, lab)][0]]
            cost, lab = min(fitting) if fitting else (None, None)
            cheapest[d].append(cost)
            findings.append(f"{fmt_params(params)} on the {d}: " + (f"{lab} ({signed(cost)})" if fitting else
                                                                      "no technique tried fits"))
        for lab in labels:
            row = [f"{fmt_params(params)}", lab]
            for d in dnames:
                ok, gib, t, over = data[(mname, d, lab)]
                row += [f"{gib:.1f}" + ("" if ok else " (no)"), f"{t:.2f}", signed(over)]
            rows.append(row)
    verdict = _verdict(spec, data, models, dnames, labels, cheapest, findings)
    return verdict, [BODY, "", md_table(["model", "technique"] + [f"{d} {c}" for d in dnames
                                                                   for c in ("GiB", "step s", "cost")],
                                        rows, "ll" + "r" * 3 * len(dnames))]


def _verdict(spec, data, models, dnames, labels, cheapest, findings) -> str:
    def spread(label: str, dname: str) -> str:
        vals = [data[(m, dname, label)][3] for m, _, _ in models if (m, dname, label) in data]
        lo, hi = signed(min(vals)), signed(max(vals))
        return lo if lo == hi else f"{lo} to {hi}"

    named = [lab for lab in spec["named"] if lab in labels]
    costs = "; ".join(f"{lab}: " + ", ".join(f"{spread(lab, d)} on the {d}" for d in dnames) for lab in named)
    z3 = {d: [data[(m, d, "ZeRO-3")][3] for m, _, _ in models if (m, d, "ZeRO-3") in data] for d in dnames}
    pcie_d, nv_d = dnames
    depends = bool(z3[pcie_d]) and bool(z3[nv_d]) and min(z3[pcie_d]) > 2 * max(z3[nv_d])
    head = ("True, and the price depends on the interconnect." if depends else
            "True; the price depends little on the interconnect.")
    mnames = [fmt_params(p) for _, _, p in models]
    jumps = []
    for d in dnames:
        text, j = crossover(mnames, cheapest[d], spec["cost_threshold"])
        jumps.append(f"on the {d} from {text}" if j is not None else
                     f"on the {d} at no size from {mnames[0]} to {mnames[-1]}")
    return (f"**{head}** The cheapest technique that fits costs more than +25% "
            + "; ".join(jumps) + ". Cheapest technique that fits, against "
            "unlimited-memory data parallelism on the same GPUs: " + "; ".join(findings)
            + f". Per technique: {costs}.")
