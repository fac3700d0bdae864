"""Continuous batching with chunked prefill over a paged KV cache: the policy, apart from time.

One `Scheduler` per replica. Each iteration it picks what runs (vLLM's V1
scheduler, Kwon et al. 2023 and the vLLM docs on chunked prefill): running
sequences first, in the order they were admitted, each with all the tokens
it has not computed yet (one for a decoding sequence, a prompt chunk for a
prefilling one) within `max_batch_tokens`; then waiting requests, first come
first served, while the token budget, `max_seqs` and free KV blocks allow
(with `guaranteed`, blocks for the prompt and the whole output, reserved at
admission, as TensorRT-LLM's GUARANTEED_NO_EVICT policy does).
When a running sequence needs a block and none is free, the most recently
admitted sequence is preempted: its blocks are freed and it waits at the
head of the queue to recompute its prompt and the tokens it has generated.

A sequence samples a token in the iteration that computes its last known
token; that iteration's end is its first token's time (TTFT) or its next
token's. The scheduler never reads a clock: the engine passes times in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from scalesim.serving.workload import Request

BLOCK_TOKENS = 16       # vLLM's default --block-size (scalesim/costs/inference.py)


def blocks_for(tokens: int, block_tokens: int = BLOCK_TOKENS) -> int:
    """Blocks that hold `tokens` tokens.

    >>> blocks_for(16), blocks_for(17), blocks_for(0)
    (1, 2, 0)
    """
    return -(-tokens // block_tokens)


def window_blocks(tokens: int, computed: int, window: int, windowed: float,
                  block_tokens: int = BLOCK_TOKENS) -> int:
    """Blocks a sequence holds for `tokens` cached tokens, `computed` of them before this step, when a
    `windowed` share of its cache (of the layers) has a sliding window of `window` keys: vLLM's V1 KV cache
    manager frees a windowed layer group's whole blocks before the next query's window
    (vllm-project/vllm vllm/v1/core/single_type_kv_cache_manager.py @129ab7c6: SlidingWindowManager
    get_num_skipped_tokens = computed - sliding_window + 1, remove_skipped_blocks), while full-attention
    layers keep every block; block counts in units of the whole model's blocks, rounded up.

    >>> window_blocks(10000, 9999, 4096, 1.0), window_blocks(10000, 9999, 4096, 0.5), blocks_for(10000)
    (256, 441, 625)
    >>> window_blocks(4000, 3999, 4096, 1.0) == blocks_for(4000)
    True
    """
    full = -(-tokens // block_tokens)
    live = full - max(0, computed - window + 1) // block_tokens
    return math.ceil(full * (1.0 - windowed) + live * windowed - 1e-9)


@dataclass(slots=True)
class Sequence:
    """Run-time state of one request on a replica."""

    request: Request
    arrival_s: float
    computed: int = 0               # tokens whose keys and values are in the cache
    generated: int = 0              # output tokens sampled so far
    blocks: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0

    @property
    def known(self) -> int:
        """Tokens the model must have seen before it samples the next one."""
        return self.request.prompt_tokens + self.generated

    @property
    def done(self) -> bool:
        return self.generated >= self.request.output_tokens


@dataclass(frozen=True, slots=True)
class Batch:
    """One iteration: per sequence (new tokens, tokens in its context after them, samples a token)."""

    sequences: tuple[Sequence, ...]
    entries: tuple[tuple[int, int, bool], ...]

    @property
    def tokens(self) -> int:
        return sum(q for q, _, _ in self.entries)


@dataclass
class Scheduler:
    """The batching policy of one replica, with its KV cache of `total_blocks` blocks."""

    total_blocks: int
    max_batch_tokens: int
    max_seqs: int
    block_tokens: int = BLOCK_TOKENS
    guaranteed: bool = False        # reserve prompt + whole output at admission; never preempt
    window: int = 0                 # sliding window of the model's windowed layers (window_blocks); 0: none
    windowed: float = 0.0           # share of the KV cache in those layers
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    used_blocks: int = 0
    peak_blocks: int = 0
    preemptions: int = 0

    @property
    def outstanding(self) -> int:
        """Requests on this replica not finished yet (what a least-loaded router compares)."""
        return len(self.waiting) + len(self.running)

    def add(self, request: Request, now_s: float) -> None:
        self.waiting.append(Sequence(request, now_s))

    def blocks(self, tokens: int, computed: int) -> int:
        """Blocks a sequence holds for `tokens` cached tokens, `computed` before this step (window_blocks)."""
        if not self.window:
            return -(-tokens // self.block_tokens)
        return window_blocks(tokens, computed, self.window, self.windowed, self.block_tokens)

    def _grow(self, seq: Sequence, tokens: int) -> bool:
        """Give `seq` blocks for `tokens` cached tokens; False when the cache has too few free."""
        return self._hold(seq, self.blocks(tokens, seq.computed))

    def _hold(self, seq: Sequence, blocks: int) -> bool:
        """Make `seq` hold `blocks` blocks; False when the cache has too few free. Blocks a window left
        behind are freed (not under `guaranteed`, which keeps what it reserved)."""
        need = blocks - seq.blocks
        if need > self.total_blocks - self.used_blocks:
            return False
        if need > 0 or need < 0 and not self.guaranteed:
            seq.blocks += need
            self.used_blocks += need
            self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        return True

    def _free(self, seq: Sequence) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def _preempt_last(self) -> Sequence:
        """Recompute-style preemption of the most recently admitted sequence: drop its cache,
        requeue it first."""
        seq = self.running.pop()
        self._free(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)
        return seq

    def _make_room(self, seq: Sequence, tokens: int) -> bool:
        """Blocks for `seq` to hold `tokens` cached tokens, preempting the newest sequences after it
        until they fit; False when `seq` itself, the last one left, was preempted."""
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        fits = self._grow(seq, tokens)
        while not fits and self.running[-1] is not seq:
            self._preempt_last()
            fits = self._grow(seq, tokens)
        if not fits:
            self._preempt_last()
        return fits

    def schedule(self) -> Batch | None:
        """The next iteration's batch, or None when there is nothing to run."""
        budget = self.max_batch_tokens
        block_tokens, running, window = self.block_tokens, self.running, self.window
        entries: list[tuple[int, int, bool]] = []
        # The running sequences in the order they were admitted. Hot loop (one pass per sequence per
        # iteration): `known` and `_grow` inlined; `used_blocks` only grows until a preemption, so its
        # peak is taken there (`_make_room`) and after the loop. A preemption pops sequences after this
        # one only, so the list iterator sees the shortened list, and those chosen are running[:n].
        for seq in running:
            if budget <= 0:
                break
            computed = seq.computed
            known = seq.request.prompt_tokens + seq.generated
            q = known - computed
            if q > budget:
                q = budget
            after = computed + q
            need = (self.blocks(after, computed) if window else -(-after // block_tokens)) - seq.blocks
            if need > 0:
                if need <= self.total_blocks - self.used_blocks:
                    seq.blocks += need
                    self.used_blocks += need
                elif not self._make_room(seq, after):
                    break
            elif need < 0 and not self.guaranteed:      # blocks the window has left behind
                seq.blocks += need
                self.used_blocks += need
            entries.append((q, after, after == known))
            budget -= q
        sequences = running[:len(entries)]
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        while self.waiting and budget > 0 and len(running) < self.max_seqs:
            seq = self.waiting[0]
            q = min(seq.known - seq.computed, budget)
            if self.guaranteed:      # prompt and whole output, or the most a window keeps of them
                prompt, total = seq.request.prompt_tokens, seq.request.prompt_tokens + seq.request.output_tokens
                fits = self._hold(seq, max(self.blocks(total, total - 1), self.blocks(prompt, 0)))
            else:
                fits = self._grow(seq, seq.computed + q)
            if not fits:
                break
            self.waiting.popleft()
            running.append(seq)
            sequences.append(seq)
            entries.append((q, seq.computed + q, seq.computed + q == seq.known))
            budget -= q
        if not sequences:
            return None
        return Batch(tuple(sequences), tuple(entries))

    def complete(self, batch: Batch, now_s: float) -> list[Sequence]:
        """Apply an iteration that ended at `now_s`; returns the sequences it finished."""
        finished = []
        for seq, (q, _, samples) in zip(batch.sequences, batch.entries):
            seq.computed += q
            if not samples:
                continue
            generated = seq.generated = seq.generated + 1
            if seq.first_token_s is None:
                seq.first_token_s = now_s
            if generated >= seq.request.output_tokens:
                seq.finish_s = now_s
                self._free(seq)
                finished.append(seq)
        if finished:
            self.running = [s for s in self.running if s.finish_s is None]
        return finished
