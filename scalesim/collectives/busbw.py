"""nccl-tests' definitions of algorithm and bus bandwidth.

algbw = size / time. busbw = algbw x factor, where the factor makes busbw
comparable to the hardware link bandwidth whatever the rank count
(nccl-tests doc/PERFORMANCE.md).

>>> bus_factor("all_reduce", 8)
1.75
>>> bus_factor("all_gather", 4)
0.75
"""

from __future__ import annotations

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "send_recv", "send")


def bus_factor(op: str, ranks: int) -> float:
    n = ranks
    if n <= 1:
        return 1.0 if op in ("broadcast", "reduce", "send_recv", "send") else 0.0
    return {
        "all_reduce": 2 * (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_gather": (n - 1) / n,
        "all_to_all": (n - 1) / n,
        "broadcast": 1.0,
        "reduce": 1.0,
        "send_recv": 1.0,
        "send": 1.0,
    }[op]


def algbw_bytes_per_s(size_bytes: float, time_s: float) -> float:
    return size_bytes / time_s if time_s > 0 else float("inf")


def busbw_bytes_per_s(op: str, ranks: int, size_bytes: float, time_s: float) -> float:
    return algbw_bytes_per_s(size_bytes, time_s) * bus_factor(op, ranks)
