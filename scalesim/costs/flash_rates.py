"""Flash attention on GPUs whose kernels publish separate forward and backward rates.

`costs.compute.FLASH_ATTENTION_EFFICIENCY` holds one fraction of the 16-bit peak per
architecture, applied to the forward and to a backward of twice the forward's time.
Where the vendor publishes the forward and the backward kernel of the default training
stack separately, on the shape of a training run, each pass takes its own measured rate
instead: the forward at `forward` x peak over the executed FLOPs, the backward at
`backward` x peak over BACKWARD_FLOP_RATIO times them (FlashAttention's own count: the
backward's five GEMMs against the forward's two, Dao 2023, benchmarks/
benchmark_flash_attention.py; CK tile's fmha_bwd benchmark counts the same). Causal
masks count half the FLOPs in both passes, as costs.compute does.

AMD (ROCm/aiter op_tests/cpp/mha/README.md @0403bcdfd0b507e0459012b82e00785a818f774a,
"the asm kernel performance of the attention forwards and attention backwards", table
added by ROCm/aiter pull request #1270, Oct 2025): the hand-written assembly ("v3")
kernels Transformer Engine on ROCm runs with NVTE_CK_USES_FWD_V3=1 / NVTE_CK_USES_BWD_V3=1
(AMD's MLPerf Training v5.1 configs, e.g. mlcommons/training_results_v5.1 AMD/benchmarks/
llama2_70b_lora/implementations/MI300X_EPYC_9575F_pytorch_llama2_70b/config_MI300X_1x8x1.sh,
with NVTE_CK_IS_V3_ATOMIC_FP32=0: the 16-bit-atomic backward, "BWD-a16"). BF16, head dim
128, GQA 64/8 heads, batch 1, sequence 8192, causal (the Llama 2 70B training shape):
MI300X forward 518.29, backward-a16 481.895 TFLOPS; MI355X 1300.105 and 1064.56, over
dense BF16 peaks of 1307.4 (MI300X, MI325X: same compute die) and 2516.6 TFLOPS.
The same table's other causal rows at 8192 tokens (32/8 and 64/4 heads, batch 1-8) lie
within 6% of these. Non-causal rows run ~10% faster; not modelled.
"""

from __future__ import annotations

BACKWARD_FLOP_RATIO = 2.5

# arch -> (forward, backward) fraction of the dense 16-bit peak, for the "flash" attention kind.
MEASURED = {
    "cdna3": (518.29 / 1307.4, 481.895 / 1307.4),
    "cdna4": (1300.105 / 2516.6, 1064.56 / 2516.6),
}


def measured_flash_s(executed_flop: float, peak_flop_per_s: float, arch: str, backward: bool) -> float | None:
    """Time of one flash-attention pass from the architecture's published per-pass rates;
    None where there are none (costs.compute then uses its single efficiency).

    >>> measured_flash_s(1e12, 1e15, "hopper", False) is None
    True
    >>> fwd, bwd = (measured_flash_s(1e12, 1307.4e12, "cdna3", b) for b in (False, True))
    >>> round(fwd * 1e3, 3), round(bwd / fwd, 2)       # ms; backward / forward time
    (1.929, 2.69)
    """
    rates = MEASURED.get(arch)
    if rates is None:
        return None
    if backward:
        return BACKWARD_FLOP_RATIO * executed_flop / (peak_flop_per_s * rates[1])
    return executed_flop / (peak_flop_per_s * rates[0])
