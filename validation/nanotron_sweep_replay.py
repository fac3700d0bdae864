"""Replay nanotron's benchmark sweep: each successful run of its CSV against scalesim's rank-0 reserved memory
(or, with --tokens, its step time).

The sweep's CSV (nanotron bench_final2 rows; a copy in eyao600/Rapid-LLM
validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6) logs, per run, world rank 0's
`Mem Res (GB)` (torch.cuda.max_memory_reserved / 1024**3 at iteration 3: helpers.py create_table_log). Each row
is re-created from a heatmap case's scenario (same cluster, kernels and saved activations) with the row's model
shape, dp / tp / pp, micro-batch, global batch and ZeRO stage, and compared with
`CompiledStep.first_stage_memory.reserved`, as `scalesim validate` compares the heatmap cells. A check of the
memory mechanisms on the ~1,750 runs the cases do not hold; nothing is fitted to it (validation/memory-notes.md,
mem8 and nmem9 used it).

    python validation/nanotron_sweep_replay.py CSV [--where "tp > 1 and pp == 1"] [--set parallel.KEY=VALUE ...]
        [--by "(model, fix, gas > pp)"] [--tokens] [--runs]

Prints one row per group (by default model, TP and PP): runs, signed median error and its range, runs within 10%. With
`--tokens` the error is the step time's ((predicted - measured) / measured, the measured step being the global batch's
tokens over the row's logged tok/s/gpu x GPUs: positive = predicted too slow) and each group also prints its median
measured and predicted milliseconds per layer and micro-batch (step / (layers x micro-batches per step)).
`--runs` (memory) prints one row per run instead: the logged `Mem Res` and `Mem Alloc` (the optimizer step's allocated
peak: trainer.py resets the peak statistics right after the pipeline, logging.py log_memory) beside scalesim's counted
state (weights, gradients, optimizer share, DDP buckets), activations, live and reserved figures, and `Mem Res` - state.
`--where` and `--by` are Python expressions over dp, tp, pp, mbs, gas, zero, nodes, healthy (the job's logged world
all_reduce is at least a quarter of p5 nccl-tests' at its node count: nanotron_sweep_check.py), job (the SLURM job id), fix (the CSV's
`after_pp_fix`: the run used nanotron's pipeline code from bench2's "pp" commit 67c5ebb6, jobs from 14097148), ar (the
job's own world all_reduce busbw in GB/s, trainer.py measure_bandwidth: 12-28 on the sweep's degraded-network jobs,
140-460 on healthy ones), model ("1.34G", "3.57G", "8.86G", "80G") and, in `--by` only, predicted (scalesim's
reserved GiB, or with --tokens its step in seconds).

    python validation/nanotron_sweep_replay.py CSV --tokens --by "(f'tp {tp}', model)" \
        --where "healthy and pp == 1 and mbs == 1 and tp > 1 and job < 14100000"

prints the tensor-parallel floor the nanotron known_miss notes quote (validation/cases/nanotron.yaml, nt11).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from nanotron_sweep_check import REFERENCE_GBPS
from scalesim.app.setup import prepare, step_time_of
from scalesim.errors import InputError
from scalesim.scenario import load_scenario

BASE = Path(__file__).resolve().parent / "scenarios" / "nanotron-8.86b-8node-dp32-tp1-pp2.yaml"
GIB = 2**30


def row_fields(row: dict) -> dict:
    # healthy: as nanotron_sweep_check.healthy, except that a one-node run (no network to degrade, no
    # REFERENCE_GBPS row) counts as healthy here; the check leaves those out.
    return {"dp": int(row["dp"]), "tp": int(row["tp"]), "pp": int(row["pp"]), "mbs": int(row["mbs"]),
            "gas": int(float(row["batch_accum"])), "zero": int(row["zero_stage"]), "job": int(row["job_id"]),
            "model": row["name"].split("_")[0], "fix": row["after_pp_fix"] == "True",
            "ar": float(row["AllReduce (GB/s)"] or 0), "nodes": max(1, int(float(row["nodes"]))),
            "healthy": float(row["AllReduce (GB/s)"] or 0) >= REFERENCE_GBPS.get(int(float(row["nodes"])), 0) / 4}


def scenario_of(row: dict, overrides: dict) -> dict:
    """The base case's scenario with this run's model, plan and batch."""
    data = yaml.safe_load(BASE.read_text())
    f = row_fields(row)
    gpus = f["dp"] * f["tp"] * f["pp"]
    data["name"] = row["name"]
    data["cluster"]["nodes"] = max(1, gpus // 8)
    if gpus < 8:
        data["cluster"]["gpus"] = gpus
    data["model"].update(layers=int(row["num_layers"]), hidden=int(row["hidden_size"]),
                         heads=int(row["num_heads"]), kv_heads=int(float(row["num_kv_heads"])),
                         vocab=int(row["vocab_size"]), ffn_hidden=int(row["interm_dim"] or 28672),
                         tied_embeddings=row["tie_word_embeddings"] == "True")
    data["training"].update(seq_len=int(row["seq_len"]), micro_batch=f["mbs"], global_batch=int(float(row["gbs"])))
    par = data["parallel"]
    par.update(dp=f["dp"], tp=f["tp"], pp=f["pp"], zero=f["zero"])
    if f["zero"] != 1:
        par.pop("zero1_over_ddp", None)
    if f["pp"] == 1:
        par.pop("pp_schedule", None)
        par.pop("pipeline_balance", None)
    if f["tp"] > 1:
        par["sequence_parallel"] = True
        par.update(overrides)
    return data


def first_stage_memory(data: dict):
    """Rank 0's MemoryBreakdown for the run `data` describes."""
    return _prepared(data).step.first_stage_memory


def predicted(data: dict, tokens: bool) -> float:
    """Rank 0's reserved GiB, or (tokens) the step time in seconds."""
    setup = _prepared(data)
    return step_time_of(setup) if tokens else setup.step.first_stage_memory.reserved / GIB


def _prepared(data: dict):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(yaml.safe_dump(data))
        scenario, file = load_scenario(path)
        return prepare(scenario, file)


def measured(row: dict, tokens: bool) -> float:
    """The row's `Mem Res (GB)`, or (tokens) its step: the global batch's tokens over tok/s/gpu x GPUs."""
    if not tokens:
        return float(row["Mem Res (GB)"])
    f = row_fields(row)
    return float(row["gbs"]) * int(row["seq_len"]) / (float(row["tok/s/gpu"]) * f["dp"] * f["tp"] * f["pp"])


def run_line(row: dict, memory) -> str:
    """One run: its plan and network, the logged figures and scalesim's breakdown of rank 0 (GiB)."""
    f = row_fields(row)
    res, alloc = float(row["Mem Res (GB)"]), float(row["Mem Alloc (GB)"])
    state = (memory.weights + memory.gradients + memory.optimizer + memory.grad_buckets) / GIB
    return (f"| {f['job']} | {f['model']} dp{f['dp']} tp{f['tp']} pp{f['pp']} mbs{f['mbs']} gas{f['gas']} z{f['zero']} | "
            f"{f['ar']:.0f} | {int(f['fix'])} | {res:.2f} | {alloc:.2f} | {state:.2f} | {memory.activations / GIB:.2f} | "
            f"{memory.live / GIB:.2f} | {memory.reserved / GIB:.2f} | {100 * (memory.reserved / GIB / res - 1):+.1f}% | "
            f"{res - state:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--where", default="True")
    parser.add_argument("--by", default="(model, f'tp {tp}', f'pp {pp}')", help="group key expression")
    parser.add_argument("--set", action="append", default=[], help="parallel.KEY=VALUE (YAML value), TP runs only")
    parser.add_argument("--tokens", action="store_true", help="compare step times instead of reserved memory")
    parser.add_argument("--runs", action="store_true", help="one row per run (logged vs counted memory, GiB)")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key.removeprefix("parallel.")] = yaml.safe_load(value)
    groups = defaultdict(list)
    if args.runs:
        print("| job | run | all_reduce GB/s | after_pp_fix | Mem Res | Mem Alloc | state | activations | live | "
              "predicted | error | Mem Res - state |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with args.csv.open() as fh:
        for row in csv.DictReader(fh):
            if row["status"] != "Success" or not eval(args.where, {}, row_fields(row)):   # noqa: S307 (local tool)
                continue
            f = row_fields(row)
            try:
                if args.runs:
                    print(run_line(row, first_stage_memory(scenario_of(row, overrides))))
                    continue
                value = predicted(scenario_of(row, overrides), args.tokens)
            except InputError as exc:
                print(f"skipped {row['name']}: {exc}", file=sys.stderr)
                continue
            key = eval(args.by, {}, dict(f, predicted=value))   # noqa: S307 (local tool)
            per_layer = 1e3 / (int(row["num_layers"]) * f["gas"])
            groups[key if isinstance(key, tuple) else (key,)].append(
                (value / measured(row, args.tokens) - 1, measured(row, args.tokens) * per_layer, value * per_layer))
    if not args.runs:
        print_groups(groups, args.tokens)


def print_groups(groups: dict, tokens: bool) -> None:
    extra = " measured ms / layer & micro-batch | predicted |" if tokens else ""
    print("| group | runs | signed median error | range | within 10% |" + extra)
    print("|---|---|---|---|---|" + ("---|---|" if tokens else ""))
    for key in sorted(groups, key=str):
        errors = [e for e, _, _ in groups[key]]
        line = (f"| {', '.join(map(str, key))} | {len(errors)} | {100 * statistics.median(errors):+.1f}% | "
                f"{100 * min(errors):+.1f}..{100 * max(errors):+.1f}% | {sum(abs(e) < 0.1 for e in errors)} |")
        if tokens:
            line += (f" {statistics.median(m for _, m, _ in groups[key]):.2f} |"
                     f" {statistics.median(p for _, _, p in groups[key]):.2f} |")
        print(line)


if __name__ == "__main__":
    main()
