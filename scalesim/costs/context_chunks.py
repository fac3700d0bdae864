"""Attention under context parallelism as its ring runs it: cp steps, one kernel each, on chunks.

Transformer Engine's context parallelism (transformer_engine/pytorch/attention.py,
AttnFuncWithCPAndKVP2P, cp_comm_type "p2p", what Megatron-core and NeMo use) passes K and V
around the ring of cp ranks and runs one flash-attention kernel per step. With a causal mask the
sequence is cut into 2 cp chunks and each rank holds two (chunk i and 2 cp - 1 - i, so the work
is balanced): step 0 attends its own two chunks causally (s/cp queries and keys), every later step
attends with no mask over half of the pairs (both query chunks to the first received key chunk, or
the second query chunk to both key chunks). Each step does the same work, 1/cp of the rank's
causal half of the s^2 score pairs. Without a mask all cp steps are full-mask kernels on s/cp
queries and keys.

A later causal step's kernel is not square: s/cp queries against s/(2 cp) keys, or s/(2 cp)
queries against s/cp keys. The first has the s/cp kernel's parallelism (query tiles x heads) and
the s/(2 cp) kernel's loop length, the second the other way round; each takes the rate of the
square kernel with the same score pairs per head, s/cp / sqrt(2) tokens (between the two lengths
AMD's table gives, log2-interpolated as costs/flash.py does).

A kernel's rate depends on the length it runs (costs/flash.py, length_rate: AMD publishes its
kernels' rates by length and mask; kernel_length_rate: the FlashAttention-2 paper's A100 rates of
FlashAttention-2 and the Triton kernel by length and mask): the rank's attention time is the sum over the steps of
(1/cp of the work) over that step's rate. Where no rate by length is published every step runs
at the full sequence's rate, as without context parallelism. Each step is one kernel launch.
"""

from __future__ import annotations

import math

from scalesim.costs.flash import WINDOW_CP_KERNELS, causal_rate, kernel_length_rate, length_rate, window_share
from scalesim.models.spec import OpSpec


def ring_steps(seq: int, causal: bool, cp: int) -> tuple[tuple[int, bool], ...]:
    """(tokens, causal) of each ring step's kernel: the diagonal step keeps the mask.

    >>> ring_steps(8192, True, 4)
    ((2048, True), (1448, False), (1448, False), (1448, False))
    >>> ring_steps(8192, False, 2), ring_steps(8192, True, 1)
    (((4096, False), (4096, False)), ((8192, True),))
    """
    chunk = max(1, seq // max(1, cp))
    later = max(1, round(chunk / math.sqrt(2))) if causal else chunk    # equal-work square (docstring)
    return ((chunk, causal),) + ((later, False),) * (max(1, cp) - 1)


def ring_time_factor(arch: str, seq: int, causal: bool, cp: int, backward: bool, attention: str = "flash") -> float:
    """The rank's attention time over what it would take at the reference rate (costs/flash.py):
    the sum over ring steps of 1/cp of the work over the step's rate (AMD's table by length, or the
    `attention` kernel's own, kernel_length_rate: each step runs at its chunk's length and mask);
    1.0 without rates by length.

    >>> ring_time_factor("cdna3", 8192, True, 1, False), ring_time_factor("hopper", 8192, True, 4, True)
    (1.0, 1.0)
    >>> ring_time_factor("cdna3", 8192, True, 4, True) > ring_time_factor("cdna3", 8192, True, 2, True) > 1
    True
    """
    steps = ring_steps(seq, causal, cp) if seq > 0 else ((seq, causal),)
    return sum(1 / len(steps) / (length_rate(arch, tokens, mask, backward)
                                 * kernel_length_rate(attention, arch, tokens, mask)) for tokens, mask in steps)


def windowed_work(op: OpSpec, arch: str, flop: float, executed: float, backward: bool,
                  attention: str = "flash") -> tuple[float, int]:
    """(work, kernels) of a causal flash attention op with a sliding window (op.window) or whose K and V
    context parallelism all-gathers (op.cp_gather), given `executed`, the work of its causal kernels over
    op.ring_steps ring steps. The band's tiles (costs/flash.py window_share) each cost what a tile of the
    unsharded causal kernel costs (its causal rate: both mask a diagonal tile per query tile); under
    context parallelism in WINDOW_CP_KERNELS kernels (Transformer Engine's all-gather path, one per local
    chunk, over the keys up to the chunk's end, or its window's; its p2p ring refuses a window,
    costs/flash.py). Mistral 7B (Jiang et al. 2023, sec. 2) reports a 2x speed-up of its FlashAttention and
    xFormers kernels with a 4096-token window at 16K tokens: 2.2x here (3696 of 8256 tiles). Without
    context parallelism the causal kernel where it does less, and for an op without a window shorter
    than its sequence.

    >>> from scalesim.models.spec import OpSpec
    >>> op = OpSpec("core", "attention", 1.0, 0.0, causal=True, seq=16384, window=4096)
    >>> round(windowed_work(op, "ampere", 1.0, 0.5, False)[0] / 0.5, 3)
    0.448
    >>> windowed_work(OpSpec("core", "attention", 1.0, 0.0, causal=True, seq=8192, window=128, ring_steps=4),
    ...               "ampere", 1.0, 0.5, False)[1]
    2
    >>> windowed_work(OpSpec("core", "attention", 1.0, 0.0, causal=True, seq=8192, ring_steps=4, cp_gather=True),
    ...               "ampere", 1.0, 0.5, False)[1]
    2
    """
    gathered = op.cp_gather and op.ring_steps > 1
    windowed = 0 < op.window < op.seq
    if not (op.causal and (windowed or gathered)):
        return ((flop * ring_time_factor(arch, op.seq, op.causal, 1, backward, attention), WINDOW_CP_KERNELS)
                if gathered else (executed, op.ring_steps))        # gathered, no mask: the whole keys
    tiles = window_share(op.seq, op.window if windowed else op.seq, op.ring_steps) / window_share(op.seq, op.seq)
    band = flop / 2 / causal_rate(arch, op.seq, attention) * ring_time_factor(
        arch, op.seq, op.causal, 1, backward, attention) * tiles
    if gathered or op.ring_steps > 1:   # TE runs a window under CP only on its all-gather path
        return band, min(WINDOW_CP_KERNELS, op.ring_steps)
    return (band, op.ring_steps) if band < executed else (executed, op.ring_steps)
