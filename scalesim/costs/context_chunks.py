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

from scalesim.costs.flash import kernel_length_rate, length_rate


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
