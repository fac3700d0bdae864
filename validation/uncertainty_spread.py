"""The step-time spread `--samples` draws from (scalesim/app/uncertainty.py), from a validate run.

    scalesim validate --json > v.json && python validation/uncertainty_spread.py v.json

Over the training-throughput cases (one GPU, multi-GPU, multi-node; reference and supplementary, not disputed,
not memory), each predicted out of sample where validate gives one (leave-one-source-out: constants fitted
without the case's source), the absolute log error |ln(predicted / measured)|: its median, and its 90th
percentile p90, whose e^p90 is the P90/P50 ratio that puts that percentile at P90.
"""

from __future__ import annotations

import json
import math
import statistics
import sys

TRAINING = ("single_gpu", "multi_gpu", "multi_node")
MEMORY = ("peak_memory_GiB", "peak_reserved_GiB")


def log_errors(report: dict) -> list[float]:
    errors = []
    for case in report["cases"]:
        if (case["status"] != "ok" or case.get("disputed") or case["category"] not in TRAINING
                or case["metric"] in MEMORY or case.get("error") is None):
            continue
        error = case["loso_error"] if case.get("loso_error") is not None else case["error"]
        errors.append(abs(math.log1p(error)))
    return errors


def main() -> None:
    errors = sorted(log_errors(json.load(open(sys.argv[1]))))
    p90 = errors[min(len(errors) - 1, math.ceil(0.9 * len(errors)) - 1)]
    print(f"{len(errors)} cases: median |log error| {statistics.median(errors):.3f}, P90 {p90:.3f}, "
          f"step_time spread r = e^P90 = {math.exp(p90):.2f}")


if __name__ == "__main__":
    main()
