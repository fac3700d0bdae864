"""Gradient buckets, as PyTorch DistributedDataParallel forms them.

Gradients are grouped into buckets in reverse layer order (the order backward
produces them); the first bucket is capped at 1 MiB and the others at
`bucket_mb` MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES and
bucket_cap_mb=25). A bucket's all-reduce is launched on the communication
stream as soon as the backward of the last layer that fills it finishes, so it
overlaps the rest of backward (see `builder.py`, which launches them).
"""

from __future__ import annotations

FIRST_BUCKET_BYTES = 1 * 2**20


def ddp_buckets(grad_bytes_per_layer: list[float], bucket_bytes: float,
                first_bucket_bytes: float = FIRST_BUCKET_BYTES) -> list[tuple[float, int]]:
    """Buckets as (bytes, index of the layer whose backward completes it), in backward order.

    `grad_bytes_per_layer` is in backward order. A layer larger than the space
    left is split across buckets (its parameter tensors go to several), and
    all of them are ready when its backward ends.

    >>> ddp_buckets([3.0, 3.0, 3.0], bucket_bytes=4.0, first_bucket_bytes=2.0)
    [(2.0, 0), (4.0, 1), (3.0, 2)]
    """
    buckets: list[tuple[float, int]] = []
    cap = first_bucket_bytes
    filled = 0.0
    for index, size in enumerate(grad_bytes_per_layer):
        left = size
        while left > 0:
            take = min(left, cap - filled)
            filled += take
            left -= take
            if filled >= cap:
                buckets.append((filled, index))
                filled = 0.0
                cap = bucket_bytes
        if filled > 0 and index == len(grad_bytes_per_layer) - 1:
            buckets.append((filled, index))
    return buckets


def tensor_buckets(tensor_bytes: list[tuple[float, ...]], bucket_bytes: float,
                   first_bucket_bytes: float = FIRST_BUCKET_BYTES) -> list[tuple[float, int, int]]:
    """Buckets of whole tensors, as torch DDP assigns them: (bytes, index of the layer whose backward
    completes it, tensors in it), in backward order.

    `tensor_bytes[i]` are layer i's gradient tensors in backward order. A tensor is never split: it
    joins the open bucket, which closes once it holds at least the cap (torch
    reducer.cpp compute_bucket_assignment_by_size), so a tensor larger than the cap is a bucket alone.

    >>> tensor_buckets([(3.0, 1.0), (5.0,)], bucket_bytes=4.0, first_bucket_bytes=2.0)
    [(3.0, 0, 1), (6.0, 1, 2)]
    >>> tensor_buckets([(1.0, 1.0), (1.0,)], bucket_bytes=4.0, first_bucket_bytes=8.0)
    [(3.0, 1, 3)]
    """
    buckets: list[tuple[float, int, int]] = []
    cap, filled, count = first_bucket_bytes, 0.0, 0
    for index, sizes in enumerate(tensor_bytes):
        for size in sizes:
            filled, count = filled + size, count + 1
            if filled >= cap:
                buckets.append((filled, index, count))
                cap, filled, count = bucket_bytes, 0.0, 0
    if count:
        buckets.append((filled, len(tensor_bytes) - 1, count))
    return buckets
