"""Which GPU counts the scaling curve of `run` and `compare` simulates."""

from __future__ import annotations


def scaling_counts(gpus: int) -> list[int]:
    """GPU counts for the scaling curve: every count up to 8, then powers of two.

    Beyond 64 GPUs, 1 and every fourth power of two up to the full size
    (1, ..., N/64, N/16, N/4, N), so big clusters stay quick to sweep; counts
    the plan cannot use (not a multiple of tp x pp x cp) are skipped later.
    """
    if gpus > 64:
        counts = sorted({1} | {gpus // 4**i for i in range(4) if gpus // 4**i >= 8})
        return counts
    counts = list(range(1, min(gpus, 8) + 1))
    k = 16
    while k < gpus:
        counts.append(k)
        k *= 2
    if gpus not in counts:
        counts.append(gpus)
    return counts
