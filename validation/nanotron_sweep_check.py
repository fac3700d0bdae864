"""Check nanotron's ZeRO-1 slice-op cost (scalesim/costs/coalesced.py SLICE_OP_FRACTION) and the
network rule of the disputed nanotron cases on the sweep's own rows that are not validation cases.

The nanotron benchmark sweep (bench_final2 CSV, copy in eyao600/Rapid-LLM
validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6) logs, per job, its tok/s/gpu and a
world all_reduce / reduce_scatter / all_gather of 1 GiB fp32 over all its GPUs (nanotron trainer.py
measure_bandwidth, @67c5ebb6). A job is taken to have had a working network when that all_reduce busbw is at
least a quarter of p5.48xlarge nccl-tests' all_reduce busbw at 1 GiB on its node count (REFERENCE_GBPS;
crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv @4fdb5a4f, 32 nodes' figure at 64).

Prints, for the ZeRO-1 runs with one micro-batch per step, tensor parallelism inside a server and no
pipeline on 16-64 servers (validation cases left out), the error at the code's SLICE_OP_FRACTION and at
13/13 (every slice op at the full Python dispatch), then each nanotron case's job with its logged network.

    PYTHONPATH=. python validation/nanotron_sweep_check.py path/to/bench_final2_mod_add.csv
"""

from __future__ import annotations

import csv
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

import scalesim.costs.coalesced as coalesced
from scalesim.app.setup import prepare, step_time_of
from scalesim.scenario import load_scenario

HERE = Path(__file__).parent
REFERENCE_GBPS = {2: 435.14, 4: 280.30, 8: 274.47, 16: 269.23, 32: 220.08, 64: 220.08}
# the validation scenario each model's runs are built from (same model block and training settings)
BASE = {"1.34G": "nanotron-1.34b-32node-dp64-tp4-pp1", "3.57G": "nanotron-3.57b-32node-dp64-tp4-pp1",
        "8.86G": "nanotron-8.86b-32node-dp32-tp8-pp1"}


def healthy(row: dict) -> bool:
    nodes = int(float(row["nodes"]))
    return nodes in REFERENCE_GBPS and float(row["AllReduce (GB/s)"]) >= REFERENCE_GBPS[nodes] / 4


def case_jobs(rows: list[dict]) -> set[str]:
    """The jobs of the nanotron throughput cases: the rows whose logged tok/s/gpu is a case's measured value."""
    cases = yaml.safe_load((HERE / "cases" / "nanotron.yaml").read_text())["cases"]
    measured = {round(c["measured"], 2) for c in cases if c["metric"] == "tokens_per_s_per_gpu"}
    return {r["job_id"] for r in rows if round(float(r["tok/s/gpu"]), 2) in measured}


def scenario_of(row: dict, folder: Path) -> Path:
    data = yaml.safe_load((HERE / "scenarios" / f"{BASE[row['Total Params']]}.yaml").read_text())
    tp = int(row["tp"])
    data["cluster"]["nodes"] = int(float(row["nodes"]))
    data["training"]["micro_batch"] = int(row["mbs"])
    data["parallel"].update(dp=int(row["dp"]), tp=tp, pp=1, zero=1, zero1_over_ddp=False, sequence_parallel=tp > 1)
    path = folder / f"job{row['job_id']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def predicted_tokens(path: Path) -> float:
    scenario, file = load_scenario(path)
    setup = prepare(scenario, file)
    return scenario.training.global_batch * scenario.training.seq_len / step_time_of(setup) / setup.gpus


def main(csv_path: str) -> None:
    rows = [r for r in csv.DictReader(open(csv_path)) if r["status"] == "Success"]
    jobs = case_jobs(rows)
    runs = [r for r in rows if healthy(r) and r["job_id"] not in jobs and r["Total Params"] in BASE
            and r["pp"] == "1" and r["zero_stage"] == "1" and int(r["tp"]) <= 8 and float(r["nodes"]) >= 16
            and int(r["dp"]) * int(r["mbs"]) == int(float(r["gbs"]))]
    fractions = {"code": coalesced.SLICE_OP_FRACTION, "full dispatch": 1.0}
    errors: dict[str, list[float]] = {name: [] for name in fractions}
    with tempfile.TemporaryDirectory() as tmp:
        for row in runs:
            path = scenario_of(row, Path(tmp))
            line = []
            for name, fraction in fractions.items():
                coalesced.SLICE_OP_FRACTION = fraction
                error = predicted_tokens(path) / float(row["tok/s/gpu"]) - 1
                errors[name].append(error)
                line.append(f"{name} {error:+.1%}")
            coalesced.SLICE_OP_FRACTION = fractions["code"]
            print(f"job {row['job_id']} {row['Total Params']} {int(float(row['nodes']))} nodes dp {row['dp']} "
                  f"tp {row['tp']} mbs {row['mbs']}: " + ", ".join(line))
    for name, values in errors.items():
        print(f"{name}: {len(values)} runs, median |error| {statistics.median(map(abs, values)):.1%}, "
              f"signed {statistics.median(values):+.1%}")
    by_job = {r["job_id"]: r for r in rows}
    for job in sorted(jobs):
        row = by_job[job]
        nodes = int(float(row["nodes"]))
        share = float(row["AllReduce (GB/s)"]) / REFERENCE_GBPS[nodes] if nodes in REFERENCE_GBPS else None
        print(f"case job {job}: {nodes} nodes, world all_reduce {row['AllReduce (GB/s)']} GB/s"
              + ("" if share is None else f" ({share:.0%} of nccl-tests){'' if share >= 0.25 else ': degraded'}"))


if __name__ == "__main__":
    main(sys.argv[1])
