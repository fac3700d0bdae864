"""How much of `torch.cuda.max_memory_reserved` over the live tensors PyTorch's caching allocator's rounding explains.

The size rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size, should_split; the
constants, unchanged since the THC allocator, now in c10/core/AllocatorConfig.h): every request rounded to kMinBlockSize (512 B); requests <= kSmallSize (1 MiB) are
carved out of kSmallBuffer (2 MiB) segments; requests below kMinLargeAlloc (10 MiB) out of kLargeBuffer
(20 MiB) segments; larger ones get a segment of their own size rounded up to kRoundLarge (2 MiB).
expandable_segments and roundup_power2_divisions are off by default. This script packs the tensors of three memory cases (shapes from their
scenarios; approximate lists, the ratio not the totals is the point: allocated once, never freed) into segments
by those rules and prints the reserved bytes over the live ones: what rounding and segment tails alone add.
validation/memory-notes.md (alloc7) has the outcome: < 0.4%, against the 5% FRAGMENTATION of
scalesim/costs/memory.py.

    python validation/allocator_rounding.py
"""

from __future__ import annotations

MIB = 2**20
MIN_BLOCK, SMALL_SIZE, SMALL_BUFFER = 512, MIB, 2 * MIB
LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE = 20 * MIB, 10 * MIB, 2 * MIB


def ceil_to(x: int, q: int) -> int:
    return -(-x // q) * q


def segment_bytes(sizes: list[int]) -> int:
    """Bytes of the segments cudaMalloc'd for `sizes`, all live at once (first-fit decreasing into the 20 MiB
    segments; the allocator's best fit packs no worse)."""
    small = sum(ceil_to(max(s, 1), MIN_BLOCK) for s in sizes if s <= SMALL_SIZE)
    large = sum(ceil_to(s, ROUND_LARGE) for s in sizes if s >= MIN_LARGE_ALLOC)
    free: list[int] = []
    for s in sorted((ceil_to(s, MIN_BLOCK) for s in sizes if SMALL_SIZE < s < MIN_LARGE_ALLOC), reverse=True):
        i = next((i for i, f in enumerate(free) if f >= s), None)
        if i is None:
            free.append(LARGE_BUFFER - s)
        else:
            free[i] -= s
    return ceil_to(small, SMALL_BUFFER) + len(free) * LARGE_BUFFER + large


def torchtitan_8b_fsdp8() -> list[int]:
    """Llama 3.1 8B, FSDP2 over 8 (dim-0 shards of fp32 params, grads, Adam m and v), one 8192-token sample."""
    h, f, kv, vocab, s = 4096, 14336, 1024, 128256, 8192
    layer = [h * h, kv * h, kv * h, h * h, f * h, f * h, h * f, h, h]
    shards = [4 * n // 8 for n in layer * 32 + [vocab * h, vocab * h, h]] * 4
    block = [2 * s * h] * 6 + [2 * s * kv] * 2 + [2 * s * f] * 3 + [4 * s] * 2
    return shards + block * 32 + [4 * s * vocab] * 2


def nanotron_886b_tp8() -> list[int]:
    """nanotron 8.86B, TP 8, micro-batch 8 x 4096: bf16 weights and DDP buckets, fp32 grads, master, m and v."""
    h, f, vocab, t, b, s = 4096, 14336, 131072, 8, 8, 4096
    params = [3 * h * h // t, h * h // t, 2 * f * h // t, h * f // t] * 32 + [vocab * h // t] * 2
    state = [2 * p for p in params] * 2 + [4 * p for p in params] * 4
    block = [2 * b * s * h] * 4 + [2 * b * s * 3 * h // t] * 2 + [2 * b * s * 2 * f // t] + [2 * b * s * f // t] * 2
    return state + (block + [2 * b * s * h // t]) * 32 + [4 * b * s * vocab // t] * 2


def answerai_7b_lora() -> list[int]:
    """Llama 2 7B LoRA rank 64 (bf16 frozen weights; adapters bf16 with fp32 master, m, v), checkpointed, 10 x 2048."""
    h, f, r, vocab, b, s = 4096, 11008, 64, 32000, 10, 2048
    frozen = ([h * h] * 4 + [f * h] * 3 + [h] * 2) * 32 + [vocab * h] * 2
    adapters = ([r * h] * 4 + [h * r] * 4 + [r * h] * 2 + [f * r] * 2 + [r * f, h * r]) * 32
    return ([2 * n for n in frozen] + [2 * a for a in adapters] + [4 * a for a in adapters] * 3
            + [2 * b * s * h] * 32 + [4 * b * s * vocab] * 2)


if __name__ == "__main__":
    for name, sizes in (("torchtitan 8B fsdp8", torchtitan_8b_fsdp8()), ("nanotron 8.86B tp8", nanotron_886b_tp8()),
                        ("answerai 7B LoRA", answerai_7b_lora())):
        live, reserved = sum(sizes), segment_bytes(sizes)
        print(f"{name}: live {live / 2**30:.3f} GiB, segments {reserved / 2**30:.3f} GiB, "
              f"+{100 * (reserved - live) / live:.3f}%")
