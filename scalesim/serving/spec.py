"""Serving scenarios: the `serving:` block of DESIGN.md's contract, validated and typed.

A serving scenario has the same `cluster`, `model` and `pricing` keys as a
training scenario and a `serving` block instead of `training` and `parallel`.
Every mistake becomes an InputError naming the file and the key (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic

from scalesim.errors import InputError
from scalesim.limits import SERVING_LIMITS, check_limits
from scalesim.scenario import ClusterSpec, PricingSpec
from scalesim.schema import Strict, validate
from scalesim.topology.design import read_yaml


class TokenDist(Strict):
    """Token counts of requests: a mean, its distribution and an upper bound.

    lognormal: `sigma` is the standard deviation of the log (ShareGPT-like prompt and
    output lengths are heavy-tailed); `max` clips every draw (default: none).
    """

    mean: pydantic.PositiveFloat
    dist: Literal["fixed", "lognormal", "exponential"] = "fixed"
    max: pydantic.PositiveInt | None = None
    sigma: pydantic.PositiveFloat = 0.5


def _token_dist(value: Any) -> Any:
    return {"mean": value, "dist": "fixed"} if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


class RequestsSpec(Strict):
    """The load: open-loop Poisson arrivals at `rate_per_s`, or `concurrency` closed-loop clients
    (each sends its next request as its last one finishes, as serving benchmarks run)."""

    rate_per_s: pydantic.PositiveFloat | None = None
    concurrency: pydantic.PositiveInt | None = None
    count: pydantic.PositiveInt = 1000
    prompt_tokens: TokenDist = TokenDist(mean=512)
    output_tokens: TokenDist = TokenDist(mean=256)
    seed: pydantic.NonNegativeInt = 0

    _tokens = pydantic.field_validator("prompt_tokens", "output_tokens", mode="before")(
        classmethod(lambda cls, v: _token_dist(v)))

    @pydantic.model_validator(mode="after")
    def _one_load(self) -> "RequestsSpec":
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise ValueError("give exactly one of rate_per_s (open-loop Poisson arrivals) or "
                             "concurrency (closed-loop clients)")
        return self


class SloSpec(Strict):
    """Latency targets, met when the P99 of each is within it (MLPerf Inference's server rule)."""

    ttft_s: pydantic.PositiveFloat = 2.0
    tpot_s: pydantic.PositiveFloat = 0.2


class ServingSpec(Strict):
    tp: pydantic.PositiveInt = 1
    pp: pydantic.PositiveInt = 1
    ep: pydantic.PositiveInt = 1
    weights: Literal["bf16", "fp16", "fp8", "int8", "int4"] = "bf16"
    kv_cache: Literal["bf16", "fp8"] = "bf16"
    max_batch_tokens: pydantic.PositiveInt = 8192
    max_seqs: pydantic.PositiveInt = 256
    router: Literal["round-robin", "least-loaded"] = "least-loaded"
    # on-demand: KV blocks as sequences grow, preempting (recompute) when they run out (vLLM).
    # guaranteed: a request starts only when its prompt and whole output fit, and is never
    # preempted (TensorRT-LLM's default capacity policy, GUARANTEED_NO_EVICT).
    admission: Literal["on-demand", "guaranteed"] = "on-demand"
    # Share of GPU memory the server may use (vLLM --gpu-memory-utilization, default 0.9).
    gpu_memory_utilization: float = pydantic.Field(0.9, gt=0.0, le=1.0)
    # TensorRT-LLM's way instead (--kv_cache_free_gpu_mem_fraction, default 0.9): this share of the
    # memory left after weights, activations and the framework goes to the KV cache.
    kv_cache_free_memory_fraction: float | None = pydantic.Field(None, gt=0.0, le=1.0)
    # Host (CPU) time per iteration not hidden behind the GPU; None: the documented default
    # (scalesim/app/serve.py, HOST_OVERHEAD_S).
    host_overhead_ms: pydantic.NonNegativeFloat | None = None
    # The host's per-iteration work (stop checks, responses, scheduling the next batch) runs while the
    # GPU computes the next iteration, so an iteration takes the longer of the two, not their sum
    # (TensorRT-LLM's overlap scheduler, on by default in its PyTorch backend; SGLang's zero-overhead
    # batch scheduler).
    overlap_scheduler: bool = False
    requests: RequestsSpec
    slo: SloSpec = SloSpec()

    @pydantic.model_validator(mode="after")
    def _batch(self) -> "ServingSpec":
        if self.max_seqs > self.max_batch_tokens:
            raise ValueError(f"max_seqs ({self.max_seqs}) cannot exceed max_batch_tokens "
                             f"({self.max_batch_tokens}): every running sequence needs a token each iteration")
        return self


class ServingScenario(Strict):
    name: str
    description: str = ""
    cluster: ClusterSpec
    model: str | dict[str, Any]
    serving: ServingSpec
    pricing: PricingSpec = PricingSpec()
    source: list[str] = []

    @pydantic.model_validator(mode="after")
    def _within_limits(self) -> "ServingScenario":
        check_limits(self, SERVING_LIMITS)      # values far beyond real deployments (scalesim/limits.py)
        return self


def load_serving_scenario(path: str | Path) -> tuple[ServingScenario, str]:
    """Read and validate a serving scenario; returns it and its path as text."""
    file = str(path)
    data = read_yaml(Path(path), what="scenario file")
    if not isinstance(data, dict):
        raise InputError("expected a mapping with name, cluster, model and serving", file=file)
    if "serving" not in data and "training" in data:
        raise InputError("this is a training scenario; `scalesim serve` needs a serving: block "
                         "(see scenarios/serve-*.yaml), or run it with `scalesim run`", file=file, key="serving")
    return validate(ServingScenario, data, file=file), file
