"""Identical GPUs are not equally fast, and a synchronous step waits for the slowest.

Manufacturing variation and power management make GPUs of one SKU run the
same kernels at different speeds: Sinha et al., "Not All GPUs Are Created
Equal" (SC22; revised arXiv 2208.11035v3, Nov 2022) measured over 90% of the
GPUs of five clusters and report "8% (max 22%) average performance variation"
with outliers up to 1.5x slower than the median GPU. (The SC22 proceedings
abstract of the earlier version says 32%, max 72%; we take the revised
figure.) Their artifact's plotting code (hal-uw/gpu_variability_sc22_artifact)
computes variability as the width between the box plot's outlier fences over
the median, 4 x IQR / median; for a normal core that is 5.4 standard
deviations, so one standard deviation of per-GPU speed is 8% / 5.4 = 1.5%
(our inference from their definition, not a figure they print).

Data, tensor and pipeline parallelism synchronise every step, so with
persistent per-GPU speeds a job of N GPUs runs at the pace of its slowest GPU:
the expected maximum of N draws, about 1.4 standard deviations above the
median for 8 GPUs, 2.3 for 64, 3.2 for 1,024 (normal order statistics,
integrated numerically). One GPU is a median draw: no slowdown, so scaling
efficiency includes this loss. Outliers (1.5x slower) are left out: operators
find and drain those.

Checked out of sample on weak scaling (same per-GPU work, more GPUs): NVIDIA's
dgxc-benchmarking Llama 3.1 step times (validation/cases/dgxc-benchmarking.yaml)
keep a flat error with this growth in place - 70B -4.0% at 64 GPUs and -4.1% at
2,048; 405B +0.7% at 32 and at 2,304; 8B -9.3% at 8 and -9.0% at 128 - where
without it the error would drift by 1.2-2 points over each range (the factor
grows 1.035 -> 1.052 from 64 to 2,048 GPUs). So the measured curves support
keeping it in the point prediction (`cluster.gpu_speed_spread: 0` removes it).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# One standard deviation of per-GPU speed, as a fraction of the median GPU's.
GPU_SPEED_SPREAD = 0.015


@lru_cache(maxsize=256)
def expected_max_standard_normal(n: int) -> float:
    """Expected largest of n standard normal draws: the integral of x n phi(x) Phi(x)^(n-1)."""
    if n <= 1:
        return 0.0
    x, pdf, log_cdf = _grid()
    y = x * n * pdf * np.exp((n - 1) * log_cdf)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


@lru_cache(maxsize=1)
def _grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.linspace(-9.0, 9.0, 18001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in x])
    return x, pdf, np.log(np.maximum(cdf, 1e-300))


def slowest_gpu_factor(gpus: int, spread: float = GPU_SPEED_SPREAD) -> float:
    """How much longer GPU work takes on the slowest of `gpus` GPUs than on the median one."""
    if spread < 0:
        raise ValueError("spread must be >= 0")
    return 1.0 + spread * expected_max_standard_normal(gpus)
