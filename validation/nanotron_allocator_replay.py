"""Replay nanotron's tensor-parallel Llama layers through PyTorch's caching allocator: what its block splitting and
the NCCL streams' pending frees add to `torch.cuda.max_memory_reserved` over the live tensors.

The allocator (torch 2.1, c10/cuda/CUDACachingAllocator.cpp; the rules alloc7's validation/allocator_rounding.py
uses): every request rounded to 512 B; requests above 1 MiB from the large pool; `get_free_block` takes the
smallest free block at least the request's size; `should_split` splits it when more than 1 MiB is left; a new
segment (`alloc_block`) is the request rounded up to 2 MiB (20 MiB below 10 MiB); `free_block` merges a freed
block with free neighbours of its segment. One stream's pool, one micro-batch, no CUDA graphs.

NCCL's pending frees: torch 2.1's ProcessGroupNCCL calls `recordStream(input, ncclStream)` on every collective's
input (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp `collective()`, unless TORCH_NCCL_AVOID_RECORD_STREAMS).
A block so marked goes back to the pool only when the event the allocator records on the NCCL stream at its free
has completed (`insert_events` at free, `process_events` at the next malloc): until the GPU has run that
collective, the block stays reserved and no request can use it. `pending` is how many such blocks are waiting
at once, i.e. how far the host is ahead of the GPU in collectives; nanotron's layers synchronise nothing with the
host, so the host may be a whole pass ahead.

The sequence is nanotron's at the sweep's commit (src/nanotron/models/llama.py @67c5ebb6, TP `t`, REDUCE_SCATTER
mode, async linears, tp_recompute_allgather true, the sequence-parallel shard s*b/t of every h-wide tensor):
- forward (LlamaDecoderLayer._core_forward, l. 717-733): TritonRMSNorm; qkv_proj's gathered output (S, 3h/t)
  (functional.py l. 179), its permute().contiguous() copy q/k/v (l. 470-473, flash-attn keeps q from it),
  torch.cat of k, v and its permute().contiguous() (l. 655-657; the cat freed), rotary in place (l. 658,
  flash_attn.layers.rotary: inplace=True), flash-attn's output (S, h/t); o_proj: F.linear's full (S, h) output
  (functional.py l. 466), reduce-scattered into a fresh shard (distributed_differentiable_primitives.py
  DifferentiableReduceScatterSum), the full output freed with its reduce-scatter pending; residual add;
  RMSNorm; gate_up's gathered output (S, 2f/t) kept by the eager SwiGLU (l. 201), SiLU and product (S, f/t)
  each; down_proj like o_proj; residual add.
- backward, layer by layer in reverse: the row linears' input gradients (functional.py l. 514: (S, f/t), (S, h/t)),
  the SwiGLU's and flash-attn's gradients, the column linears' full (S, h) input gradient (`grad_output.matmul
  (weight)`, l. 296) reduce-scattered asynchronously (l. 318) and freed pending, each saved tensor freed after its
  last use; MemoryBuffer's two full-sequence buffers ("allgather", "allgather2") persist throughout.
Weights, gradients and optimizer state are left out: they are allocated before the first step and change nothing
here. The result is printed as (max reserved - live peak) per decoder layer, in full (S, h) 16-bit tensors.

    python validation/nanotron_allocator_replay.py

validation/memory-notes.md (nmem10) has the outcome: splitting alone adds at most 0.36 (TP 2) and 0.06 (TP >= 8)
such tensors a layer; the runs of the sweep on a healthy network carry ~1.6-1.9 at TP 16-32, which only the
pending reduce-scatter inputs of a whole pass reach (2 a layer).
"""

from __future__ import annotations

from allocator_rounding import LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_SIZE, ceil_to


class CachingAllocator:
    """The large pool of one stream: segments of [address, size, free] blocks, best fit, split, merge."""

    def __init__(self, limit: float | None = None) -> None:
        self.segments: list[list[list]] = []
        self.reserved = self.allocated = self.peak_reserved = self.peak_allocated = 0
        self.blocks: dict[int, tuple[list, list]] = {}
        self._next = 0
        self.limit, self.releases = limit, 0
        self.before_release = None      # frees the blocks waiting for their events (synchronize_and_free_events)

    def release(self) -> None:
        """cudaMalloc failed: free every segment that is one free block and retry (malloc's `release_cached_blocks`,
        which first waits for the pending events: 'Free all non-split cached blocks and retry alloc')."""
        if self.before_release is not None:
            self.before_release()
        kept = [seg for seg in self.segments if len(seg) > 1 or not seg[0][2]]
        self.reserved -= sum(seg[0][1] for seg in self.segments if len(seg) == 1 and seg[0][2])
        self.segments = kept
        self.releases += 1

    def malloc(self, size: int) -> int:
        size = ceil_to(max(size, 1), MIN_BLOCK)
        best = None
        for seg in self.segments:
            for block in seg:
                if block[2] and block[1] >= size and (best is None or block[1] < best[1][1]):
                    best = (seg, block)
        if best is None:
            grant = ceil_to(size, ROUND_LARGE) if size >= MIN_LARGE_ALLOC else LARGE_BUFFER
            if self.limit is not None and self.reserved + grant > self.limit:
                self.release()
                if self.reserved + grant > self.limit:
                    raise MemoryError(f"out of memory: {self.reserved + grant} bytes over {self.limit:.0f}")
            base = sum(b[1] for s in self.segments for b in s)
            seg = [[base, grant, True]]
            self.segments.append(seg)
            self.reserved += grant
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            best = (seg, seg[0])
        seg, block = best
        if block[1] - size > SMALL_SIZE:
            seg.insert(seg.index(block) + 1, [block[0] + size, block[1] - size, True])
            block[1] = size
        block[2] = False
        self.allocated += block[1]
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self._next += 1
        self.blocks[self._next] = (seg, block)
        return self._next

    def free(self, handle: int) -> None:
        seg, block = self.blocks.pop(handle)
        self.allocated -= block[1]
        block[2] = True
        i = seg.index(block)
        if i + 1 < len(seg) and seg[i + 1][2]:
            block[1] += seg.pop(i + 1)[1]
        if i > 0 and seg[i - 1][2]:
            seg[i - 1][1] += seg.pop(i)[1]


class Layers:
    """nanotron's decoder layers at TP `tp` (tokens = s * b) on one allocator, with `pending` NCCL inputs waiting for
    their collective at once (counted as allocated while they wait: the allocator cannot hand them out)."""

    def __init__(self, hidden: int, ffn: int, tp: int, tokens: int, pending: int) -> None:
        self.a = CachingAllocator()
        self.full, self.tp, self.f, self.pending = 2 * tokens * hidden, tp, ffn / hidden, pending
        self.waiting: list[int] = []
        self.a.malloc(self.full)    # MemoryBuffer "allgather"
        self.a.malloc(self.full)    # MemoryBuffer "allgather2"

    def new(self, k: float) -> int:
        """A tensor of k/t full (s, b, h) tensors."""
        return self.a.malloc(int(k * self.full / self.tp))

    def free(self, *handles: int) -> None:
        for h in handles:
            self.a.free(h)

    def nccl_free(self, handle: int) -> None:
        """Free a collective's input: back to the pool once `pending` later ones are waiting."""
        self.waiting.append(handle)
        while len(self.waiting) > self.pending:
            self.a.free(self.waiting.pop(0))

    def reduce_scattered(self) -> int:
        """A full (S, h) product reduce-scattered into a fresh shard: the shard."""
        out = self.a.malloc(self.full)
        shard = self.new(1)
        self.nccl_free(out)
        return shard

    def forward(self, x: int) -> tuple[int, tuple]:
        """One layer's forward from its input shard `x`: (output shard, the tensors kept for backward)."""
        f = self.f
        y1, qkv, qkvc = self.new(1), self.new(3), self.new(3)
        cat = self.new(2)
        kv = self.new(2)
        self.free(cat)
        att = self.new(1)
        out_shard = self.reduce_scattered()
        self.free(qkv)
        a1, y2 = self.new(1), self.new(1)
        merged, silu, prod = self.new(2 * f), self.new(f), self.new(f)
        down_shard = self.reduce_scattered()
        a2 = self.new(1)
        self.free(out_shard, down_shard)
        return a2, (x, y1, qkvc, kv, att, a1, y2, merged, silu, prod)

    def backward(self, grad: int, kept: tuple) -> int:
        """One layer's backward from the output gradient `grad`: the input gradient; frees what forward kept."""
        f = self.f
        x, y1, qkvc, kv, att, a1, y2, merged, silu, prod = kept
        g_prod = self.new(f)
        self.free(prod)
        g_silu, g_up = self.new(f), self.new(f)
        self.free(g_prod, silu)
        g_gate = self.new(f)
        self.free(g_silu)
        g_merged = self.new(2 * f)
        self.free(g_gate, g_up, merged)
        g_shard = self.reduce_scattered()
        self.free(g_merged, y2)
        grad = self.norm_and_residual(g_shard, grad, a1)
        g_att = self.new(1)
        dq, dk, dv = self.new(1), self.new(1), self.new(1)
        self.free(self.new(2))     # flash-attn's fp32 dq accumulator
        self.free(g_att, att)
        g_kv = self.new(2)
        self.free(dk, dv, kv)
        g_cat = self.new(2)
        self.free(g_kv)
        g_qkv = self.new(3)
        self.free(dq, g_cat, qkvc)
        g_shard = self.reduce_scattered()
        self.free(g_qkv, y1)
        return self.norm_and_residual(g_shard, grad, x)

    def norm_and_residual(self, g_shard: int, grad: int, norm_input: int) -> int:
        """RMSNorm's input gradient added to the residual's: the new gradient; frees the old and the norm's input."""
        g_norm = self.new(1)
        self.free(g_shard)
        out = self.new(1)
        self.free(g_norm, grad, norm_input)
        return out


def replay(layers: int, hidden: int, ffn: int, tp: int, tokens: int, pending: int) -> tuple[int, int]:
    """(max reserved, max allocated) bytes of one micro-batch's forward and backward through `layers` layers."""
    model = Layers(hidden, ffn, tp, tokens, pending)
    x = model.new(1)
    kept = []
    for _ in range(layers):
        x, k = model.forward(x)
        kept.append(k)
    grad = model.new(1)
    for k in reversed(kept):
        grad = model.backward(grad, k)
    return model.a.peak_reserved, model.a.peak_allocated


def main() -> None:
    print("| model, micro-batch 8 | TP | pending 0 | 2 | 16 | a forward (2 a layer) | forward and backward |")
    print("|---|---|---|---|---|---|---|")
    for name, layers, hidden, ffn in (("3.57B", 28, 3072, 8192), ("8.86B", 32, 4096, 14336)):
        tokens = 8 * 4096
        for tp in (2, 4, 8, 16, 32):
            base_res, base_live = replay(layers, hidden, ffn, tp, tokens, 0)
            cells = [f"{(base_res - base_live) / (2 * tokens * hidden) / layers:+.2f}"]
            for pending in (2, 16, 2 * layers, 4 * layers):
                res, _ = replay(layers, hidden, ffn, tp, tokens, pending)
                cells.append(f"{(res - base_live) / (2 * tokens * hidden) / layers:+.2f}")
            print(f"| {name} | {tp} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
