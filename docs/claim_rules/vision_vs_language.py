"""8. Vision vs language models across GPUs: weak scaling of data parallelism, in and across servers."""

from __future__ import annotations

import math

from claim_rules.common import Ctx, crossover, md_table, pct, span

from scalesim.app.collective_bench import time_collective
from scalesim.models import get_model
from scalesim.report.claim_plots import scaling_panels_plot
from scalesim.topology import build_cluster, load_node_design

BODY = ("Data parallel (DDP), weak scaling: the same per-GPU micro-batch at every count (mb: the largest power "
        "of two that fits the 24 GB card, images or sequences of 1,024 tokens), one micro-batch per step; "
        "1-8 GPUs in one server, 16 and 32 over the fabric. Efficiency is per-GPU throughput against one GPU. "
        "*Parameters per GFLOP* is the gradient each GPU must all-reduce per unit of its compute per step: "
        "the lower, the easier to hide, though when the gradients become ready matters too.")


def simulate(ctx: Ctx, spec: dict, models: list[dict], counts: list[int]) -> tuple[dict, dict, dict]:
    """Scaling curves per (design, model), the micro-batch and training changes per model, which are language."""
    designs = [(ctx.load(d["file"]), d["label"]) for d in spec["scenarios"]]
    gpus = max(counts)
    (s4090, f4090), _ = designs[0]
    curves, micro, language = {}, {}, {}
    for entry in models:
        m = entry["name"]
        language[m] = get_model(m, seq_len=None).tokens_per_sample is not None
        training = spec["language_training"] if language[m] else {}
        # The largest power-of-two micro-batch (up to the cap) that fits the 24 GB card, for both designs.
        mb = entry["micro_batch_cap"]
        while mb > 1 and not ctx.sims.fits(s4090.with_changes(model=m, training={
                **training, "micro_batch": mb, "global_batch": mb * gpus}), f4090):
            mb //= 2
        micro[m] = (mb, training)
    for (s, f), dname in designs:
        for m, (mb, training) in micro.items():
            sc = s.with_changes(model=m, training={**training, "micro_batch": mb, "global_batch": mb * gpus},
                                cluster={"nodes": math.ceil(gpus / 8), "gpus": gpus})
            r = ctx.sims.result(sc, f, scaling=tuple(counts))
            curves[(dname, m)] = {p["gpus"]: p["scaling_efficiency"] for p in r["scaling"]} if r else {}
    return curves, micro, language


def _bench(s, gpus: int, size: int) -> list[str]:
    """Why efficiency drops from 2 to 4 servers: the all-reduce's bus bandwidth on that fabric."""
    out = []
    for nodes in (2, max(2, math.ceil(gpus / 8))):
        topo = build_cluster(load_node_design(s.cluster.node), nodes=nodes, fabric=s.cluster.fabric.as_fabric())
        row = time_collective(topo, "all_reduce", 8 * nodes, size)
        out.append(f"{nodes} servers {row.busbw_GBps:.1f} GB/s ({row.algo})")
    return out


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    models, counts = ctx.grid(spec, "models"), ctx.grid(spec, "counts")
    dnames = [d["label"] for d in spec["scenarios"]]
    curves, micro, language = simulate(ctx, spec, models, counts)
    scaling_panels_plot(ctx.plot(ctx.plots / "vision-vs-language.png"), counts,
                        {d: {m: curves[(d, m)] for m in micro} for d in dnames},
                        {m for m in micro if language[m]}, "scaling efficiency (%, solid: vision, dashed: language)")
    labels = [f"{c} GPU{'s' if c > 1 else ''}" for c in counts]
    rows, notes = [], []
    for dname in dnames:
        for m in micro:
            c, model = curves[(dname, m)], get_model(m, seq_len=None)
            text, _ = crossover(labels, [c.get(k) for k in counts], spec["efficiency_threshold"])
            rows.append([dname, m, "language" if language[m] else "vision", str(micro[m][0]),
                         f"{model.params / (model.model_flop_per_sample * micro[m][0] / 1e9):,.0f}"]
                        + [pct(c.get(k)) for k in counts] + [text])
            if dname == dnames[0]:
                notes.append(f"{m} {text}")
    s4090, _ = ctx.load(spec["scenarios"][0]["file"])
    fab = s4090.cluster.fabric
    bench = _bench(s4090, max(counts), spec["bench_bytes"])
    body = [
        BODY, "",
        f"- Simulated all-reduce bus bandwidth of 256 MiB across the 4090 servers ({fab.link}, "
        f"{fab.nics_per_node} NIC per server): {'; '.join(bench)}.",
        "",
        md_table(["servers", "model", "kind", "mb", "parameters per GFLOP of a step"]
                 + labels + ["90% crossed"], rows, "lllrr" + "r" * len(counts) + "l"),
    ]
    return _verdict(curves, language, counts, dnames, notes, fab.link), body


def _verdict(curves, language, counts, dnames, notes, link) -> str:
    d4090, dnv = dnames
    gpus, in_node = max(counts), max(k for k in counts if k <= 8)
    models = list(language)

    def at(kind: bool, k: int) -> list:
        return [curves[(d4090, m)].get(k) for m in models if language[m] == kind]

    vis8, lang8, visN, langN = at(False, in_node), at(True, in_node), at(False, gpus), at(True, gpus)
    last = {m: curves[(d4090, m)].get(gpus) for m in models}
    best = max(last, key=lambda m: (last[m] or 0))
    vision = [m for m in models if not language[m]]
    worst_vision = min(vision, key=lambda m: (last[m] or 0)) if vision else None
    all8 = [curves[(d4090, m)].get(in_node) for m in models]
    if vision and len(vision) < len(models) and min(vis8) > max(lang8) and min(visN) > max(langN):
        head = "True: on 4090s the vision models scale better than the language models."
    elif worst_vision and min(visN) <= max(langN):
        head = (f"Partly: {best} scales best on 4090s, but {worst_vision} scales no better than the language "
                f"models across servers; within one server every model keeps {span(all8)}.")
    else:
        head = f"Partly: within one server every model keeps {span(all8)}; across servers they part ways."
    nv_all = [v for (d, _), c in curves.items() if d == dnv for v in c.values()]
    return (f"**{head}** In one server of {in_node} RTX 4090s the vision models keep {span(vis8)} scaling "
            f"efficiency, the language models {span(lang8)}; at {gpus} GPUs over one {link} NIC per server, "
            f"vision {span(visN)}, language {span(langN)}. Below 90%: " + "; ".join(notes)
            + f". The DGX A100s with InfiniBand keep {span(nv_all)} everywhere on the grid.")
