"""Flash-attention speed by head shape, relative to the 128-wide heads its efficiency is quoted for.

`costs.compute.flash_efficiency` is per architecture and comes from 128-wide heads
(Dao 2023; Shah et al. 2024). DeepSeek's multi-head latent attention runs heads of
192 for queries and keys (128 without position + 64 rotary) and 128 for values
(`models.moe.mla_ops`), a shape the kernels handle with their own tile
configurations. Where a measurement of the same kernel, on the same GPU and
problem, exists for both shapes, the ratio of the two throughputs (FLOP counted
with each pass's own head dims) scales the flash efficiency, per pass. No
measurement, no change (factor 1).
"""

from __future__ import annotations

# (forward, backward) throughput of a head shape over the 128/128 one, per architecture.
# Blackwell (B200, sm100), FlashAttention-4 (CuTe DSL), BF16, causal, seqlen 8192, batch 4,
# 16 heads, 2-CTA backward: hdim 192/128 fwd 1494.1, bwd 971.1 TFLOPS
# (Dao-AILab/flash-attention pull request #2270, "Add hdim 192 hdimv 128 backward for sm100");
# hdim 128 fwd 1418.1, bwd 1208.6 TFLOPS (pull request #2280, "Fix and enable 2CTA path for
# hdim 128 backward", same benchmark). Wider query/key heads keep the forward's tensor cores
# as busy (+5%) but slow its backward (-20%): more accumulator state per tile.
MEASURED_RELATIVE = {
    "blackwell": {(192, 128): (1494.1 / 1418.1, 971.1 / 1208.6)},
}
REFERENCE_HEAD_DIMS = (128, 128)


def head_dim_factor(head_dims: tuple[int, int] | None, arch: str, backward: bool = False) -> float:
    """Throughput of flash attention with (query/key, value) head dims `head_dims` relative
    to 128/128 heads on `arch`; 1 for standard heads (None) and unmeasured shapes.

    >>> head_dim_factor(None, "blackwell"), head_dim_factor((192, 128), "hopper")
    (1.0, 1.0)
    >>> head_dim_factor((192, 128), "blackwell", backward=True) < 1.0
    True
    """
    if head_dims is None or head_dims == REFERENCE_HEAD_DIMS:
        return 1.0
    measured = MEASURED_RELATIVE.get(arch, {}).get(tuple(head_dims))
    if measured is None:
        return 1.0
    return measured[1 if backward else 0]
