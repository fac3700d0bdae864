"""Requests as data: seeded draws of prompt and output lengths and Poisson arrival times.

Randomness comes in through the scenario's seed only (numpy's Generator), so
the same scenario gives the same requests. Inter-arrival gaps are unit
exponentials divided by the rate: at a higher rate the same requests arrive
in the same order, closer together, which keeps rate sweeps comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalesim.serving.spec import RequestsSpec, TokenDist


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    arrival_s: float | None        # None in a closed loop: sent when a client is free
    prompt_tokens: int
    output_tokens: int


def draw_tokens(dist: TokenDist, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` token counts of at least 1 (and at most dist.max), with the given mean before clipping.

    >>> draw_tokens(TokenDist(mean=7), 3, np.random.default_rng(0)).tolist()
    [7, 7, 7]
    """
    if dist.dist == "fixed":
        values = np.full(count, dist.mean)
    elif dist.dist == "exponential":
        values = rng.exponential(dist.mean, count)
    else:                       # lognormal with the given mean: mu = ln(mean) - sigma^2 / 2
        values = rng.lognormal(np.log(dist.mean) - dist.sigma ** 2 / 2, dist.sigma, count)
    values = np.maximum(np.rint(values), 1)
    if dist.max is not None:
        values = np.minimum(values, dist.max)
    return values.astype(int)


def generate(spec: RequestsSpec, rate_per_s: float | None = None) -> tuple[Request, ...]:
    """The scenario's requests; `rate_per_s` overrides the rate (open loop at that rate).

    >>> from scalesim.serving.spec import RequestsSpec
    >>> reqs = generate(RequestsSpec(rate_per_s=2, count=3, prompt_tokens=10, output_tokens=5))
    >>> [r.prompt_tokens for r in reqs], reqs[0].arrival_s < reqs[1].arrival_s < reqs[2].arrival_s
    ([10, 10, 10], True)
    """
    rng = np.random.default_rng(spec.seed)
    gaps = rng.exponential(1.0, spec.count)
    prompts = draw_tokens(spec.prompt_tokens, spec.count, rng)
    outputs = draw_tokens(spec.output_tokens, spec.count, rng)
    rate = rate_per_s if rate_per_s is not None else spec.rate_per_s
    arrivals = None if rate is None else np.cumsum(gaps) / rate
    return tuple(Request(i, None if arrivals is None else float(arrivals[i]), int(prompts[i]), int(outputs[i]))
                 for i in range(spec.count))
