"""Latency and throughput of a simulated serving run, from its finished requests.

Percentiles are computed exactly over all finished requests (numpy's linear
interpolation between order statistics), so they are deterministic; a run
keeps three floats per request, small enough not to need a sketch.

- TTFT: first token time less arrival (queueing and prefill included).
- TPOT: (finish - first token) / (output tokens - 1), per request with more than
  one output token (vLLM's benchmark_serving definition).
- End-to-end latency: finish less arrival.
- Throughput: output tokens (and requests) over the span from the first arrival
  to the last finish.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Record:
    """What the engine keeps of one finished request."""

    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    preemptions: int = 0


def percentiles(values) -> dict[str, float] | None:
    """{p50, p90, p99} of `values`, None when there are none.

    >>> percentiles([1.0, 2.0, 3.0, 4.0, 5.0])["p50"]
    3.0
    """
    if len(values) == 0:
        return None
    points = np.percentile(np.asarray(values, dtype=float), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, points)}


def summarise(records: list[Record]) -> dict:
    """TTFT, TPOT and end-to-end percentiles, throughputs and the measured span."""
    if not records:
        return {"ttft_s": None, "tpot_s": None, "e2e_latency_s": None, "output_tokens_per_s": 0.0,
                "requests_per_s": 0.0, "span_s": 0.0, "requests": 0}
    start = min(r.arrival_s for r in records)
    end = max(r.finish_s for r in records)
    span = max(end - start, 1e-12)
    tokens = sum(r.output_tokens for r in records)
    tpot = [(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in records if r.output_tokens > 1]
    return {
        "ttft_s": percentiles([r.first_token_s - r.arrival_s for r in records]),
        "tpot_s": percentiles(tpot),
        "e2e_latency_s": percentiles([r.finish_s - r.arrival_s for r in records]),
        "output_tokens_per_s": tokens / span,
        "requests_per_s": len(records) / span,
        "span_s": span,
        "requests": len(records),
    }


def meets_slo(summary: dict, ttft_s: float, tpot_s: float) -> bool:
    """P99 TTFT and P99 TPOT within their targets (MLPerf Inference's server-scenario rule).

    >>> meets_slo({"ttft_s": {"p99": 0.5}, "tpot_s": {"p99": 0.04}}, 1.0, 0.05)
    True
    """
    ttft, tpot = summary.get("ttft_s"), summary.get("tpot_s")
    if ttft is None:
        return False
    return ttft["p99"] <= ttft_s and (tpot is None or tpot["p99"] <= tpot_s)
