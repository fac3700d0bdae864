"""2. What fits in 24 GB: memory per GPU along the ladder for each technique (no simulation)."""

from __future__ import annotations

from claim_rules.common import GiB, Ctx, fmt_params, md_table, pct

from scalesim.costs.memory import FRAGMENTATION, FRAMEWORK_OVERHEAD_BYTES, state_bytes_per_param
from scalesim.report.claim_plots import fit_plot


def _largest(need: list, capacity: float, names: list[str]) -> tuple[int | None, str]:
    fit = [n is not None and n <= capacity for n in need]
    last = max((i for i, ok in enumerate(fit) if ok), default=None)
    if last is None:
        return last, f"nothing on the ladder (smallest {names[0]} needs {need[0] / GiB:.1f} GiB)"
    if last == len(need) - 1:
        return last, f"the whole ladder, up to {names[-1]}"
    return last, f"{names[last]}, not {names[last + 1]}"


def run(ctx: Ctx, spec: dict) -> tuple[str, list[str]]:
    rungs = ctx.ladder if not ctx.quick else ctx.ladder[::3]
    names = [f"{fmt_params(p)}" for _, _, p in rungs]
    claimed = spec["claimed_params"]
    table, series, largest = [], {}, []
    for entry in spec["scenarios"]:
        s, f = ctx.load(entry["file"])
        label = entry["label"]
        need = [None if m is None else m[0] for m in (ctx.sims.memory(s.with_changes(model=r[1]), f) for r in rungs)]
        capacity = ctx.sims.memory(s, f)[1]
        series[label] = need
        last, where = _largest(need, capacity, names)
        largest.append((label, last, where))
        seven = next((n for (nm, _, _), n in zip(rungs, need) if nm == "llama2-7b"), None)
        table.append([label, where, "n/a" if seven is None else f"{seven / GiB:.0f} GiB"])
    fit_plot(ctx.plot(ctx.plots / "fit-24gb.png"), [p for _, _, p in rungs], series, capacity, claimed)
    plain = largest[0]
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
               f"card fits {plain[2]} on this ladder; a 6.7B model (Llama 2 7B) needs {table[0][2]} per GPU. "
               f"Memory-saving techniques move the limit: " + "; ".join(f"{lab}: {w}" for lab, _, w in largest[2:])
               + ". " + (f"Only these reach 6B: {'; '.join(reach)}." if reach else "None of them reaches 6B."))
    return verdict, _body(bpp, table)


def _body(bpp: float, table: list[list[str]]) -> list[str]:
    return [
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
        "What pushes the limit further, left out of this table but modelled too: LoRA and QLoRA "
        "(`training.finetune`: most of the parameters frozen, no optimizer state for them; "
        "[claims-finetune.md](claims-finetune.md)), 8-bit optimizers (`training.optimizer: adamw-8bit`), "
        "offloading the weights themselves (`parallel.offload_params`, as ZeRO-Infinity does). Host memory for "
        "offloaded optimizer state is checked only where the node design gives `host.memory_gb` (the 4090 server "
        f"here does not; {state_bytes_per_param('bf16', 'adamw')[2]:.0f} bytes per parameter in CPU RAM).",
    ]
