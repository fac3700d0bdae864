"""`scalesim compare` over serving scenarios: each design at its highest rate under the SLO.

Designs must do the same work (model, prompt and output token distributions, SLO), as
training comparisons must train the same model on the same tokens. Each is simulated
with `scalesim serve`'s rate search; the table holds, at that rate, the throughput,
latency and cost per million output tokens, and the Pareto front is cost against
median end-to-end latency (both minimised; cloud and owned prices as separate options).
"""

from __future__ import annotations

from pathlib import Path

from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.result import pareto_front
from scalesim.app.serve import serve
from scalesim.serving.spec import ServingScenario, load_serving_scenario
from scalesim.topology.design import read_yaml

SAME_WORK = (("model", lambda s: s.model),
             ("serving.requests.prompt_tokens", lambda s: s.serving.requests.prompt_tokens),
             ("serving.requests.output_tokens", lambda s: s.serving.requests.output_tokens),
             ("serving.slo", lambda s: s.serving.slo))


def is_serving_file(path: str | Path) -> bool:
    data = read_yaml(Path(path), what="scenario file")
    return isinstance(data, dict) and "serving" in data


def check_same_work(loaded: list[tuple[ServingScenario, str]]) -> None:
    """InputError naming the first key on which a design's work differs from the first design's."""
    first, first_file = loaded[0]
    for scenario, file in loaded[1:]:
        for key, get in SAME_WORK:
            if get(scenario) != get(first):
                raise InputError(f"differs from {first_file} ({_as_yaml(get(first))} there, "
                                 f"{_as_yaml(get(scenario))} here); "
                                 f"serving designs compare only on the same model, requests and SLO: make them equal",
                                 file=file, key=key)


def _as_yaml(value) -> str:
    """A value as the scenario file writes it (a section as {key: value, ...}, not a Python repr)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_as_yaml(v)}" for k, v in value.items()) + "}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _at_best_rate(result: dict) -> dict:
    best = result.get("max_rate_under_slo")
    row = next((p for p in result.get("sweep", []) if p["rate_per_s"] == best), None)
    if row is None:
        return {"max_rate_under_slo": best, "output_tokens_per_s": None, "ttft_p99_s": None, "tpot_p99_s": None,
                "e2e_p50_s": None, "usd_per_million_tokens": None, "owned_usd_per_million_tokens": None}
    cost = row["cost_per_million_tokens_usd"]
    return {"max_rate_under_slo": best, "output_tokens_per_s": row["output_tokens_per_s"],
            "ttft_p99_s": row["ttft_s"]["p99"], "tpot_p99_s": row["tpot_s"]["p99"] if row["tpot_s"] else None,
            "e2e_p50_s": row["e2e_latency_s"]["p50"], "usd_per_million_tokens": cost["cloud"],
            "owned_usd_per_million_tokens": cost["owned"]}


def compare_serving(files: list[str | Path], catalog: Catalog | None = None) -> dict:
    """Simulate each serving design (GPUs and links named in `catalog`: the built-in one) and
    assemble the comparison (`compare --json` for serving)."""
    loaded = [load_serving_scenario(f) for f in files]
    check_same_work(loaded)
    results = [serve(scenario, file, catalog=catalog) for scenario, file in loaded]
    rows = [{"file": file, "scenario": r["scenario"], "gpus": r["gpus"], "gpu": r["gpu"], "fits": r["fits"],
             "plan": r["plan"], **_at_best_rate(r)} for (_, file), r in zip(loaded, results)]
    options = [(r["e2e_p50_s"], r[key], r["scenario"], kind) for r in rows
               for kind, key in (("cloud", "usd_per_million_tokens"), ("owned", "owned_usd_per_million_tokens"))
               if r["e2e_p50_s"] is not None and r[key] is not None]
    front = [{"scenario": options[i][2], "kind": options[i][3], "e2e_p50_s": options[i][0],
              "usd_per_million_tokens": options[i][1]} for i in pareto_front([(o[0], o[1]) for o in options])]
    return {"table": rows, "pareto_front": front, "designs": results}
