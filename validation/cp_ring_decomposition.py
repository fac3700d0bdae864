"""torchtitan's Dec 2024 context-parallel rows (Table 2): what the measured steps say about the ring's cost.

    python validation/cp_ring_decomposition.py

All four rows hold 32,768 tokens a GPU (local batch 1, sequence 32k x CP), so everything but attention is the
same work in each, and a load-balanced causal ring gives each rank CP/2 x 32k^2 score pairs: CP units of the
CP 1 row's attention. scalesim's predicted steps are exactly affine in CP, T = N + A x CP; this script fits N
and A on them (the non-attention time and one unit of attention as modelled), then asks the measured steps
(tokens a GPU / tokens/s a GPU) the same question: the measured time of one attention unit at each CP,
(T_measured - N) / CP, and, taking the CP 1 row's unit as the causal diagonal step's (step 0 of every ring),
the measured cost of one later, full-mask step, (T_measured - N - d) / (CP - 1). A mechanism that costs the
same per ring step, per byte moved or per unit of attention keeps those figures flat (or sliding smoothly with
CP); the rows show a step between CP 2 and CP 4 instead (validation/context-parallel-notes.md, cp11). Each
scenario runs as `python -m scalesim run FILE --json`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOKENS_PER_GPU = 32768
ROWS = ("fsdp8-cp1-seq32k", "fsdp4-cp2-seq64k", "fsdp2-cp4-seq128k", "fsdp1-cp8-seq256k")


def measured_tps() -> dict[str, float]:
    """Measured tokens/s a GPU of each row, from validation/cases/torchtitan.yaml."""
    cases = yaml.safe_load((ROOT / "validation/cases/torchtitan.yaml").read_text())["cases"]
    return {row: case["measured"] for row in ROWS for case in cases
            if case["id"] == f"torchtitan-2412-llama3.1-8b-{row}-tps"}


def predicted_step_s(row: str) -> float:
    scenario = ROOT / f"validation/scenarios/torchtitan-2412-llama3.1-8b-{row}.yaml"
    out = subprocess.run([sys.executable, "-m", "scalesim", "run", str(scenario), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)["step_time_s"]


def main() -> None:
    tps = measured_tps()
    cps = [int(row.split("-cp")[1].split("-")[0]) for row in ROWS]
    predicted = [predicted_step_s(row) for row in ROWS]
    measured = [TOKENS_PER_GPU / tps[row] for row in ROWS]
    n = len(cps)
    mean_cp, mean_t = sum(cps) / n, sum(predicted) / n
    unit = (sum((c - mean_cp) * (t - mean_t) for c, t in zip(cps, predicted))
            / sum((c - mean_cp) ** 2 for c in cps))
    rest = mean_t - unit * mean_cp
    print(f"model: step = {rest:.2f} s + {unit:.2f} s x CP (largest residual "
          f"{max(abs(t - rest - unit * c) for c, t in zip(cps, predicted)):.3f} s)")
    diagonal = measured[cps.index(1)] - rest
    print("CP  measured step (s)  predicted (s)  error (tokens/s)  s per attention unit  s per later step")
    for c, t_meas, t_pred in zip(cps, measured, predicted):
        later = f"{(t_meas - rest - diagonal) / (c - 1):.2f}" if c > 1 else "-"
        print(f"{c:<3} {t_meas:>17.2f} {t_pred:>14.2f} {t_meas / t_pred - 1:>+17.1%} {(t_meas - rest) / c:>21.2f} "
              f"{later:>17}")


if __name__ == "__main__":
    main()
