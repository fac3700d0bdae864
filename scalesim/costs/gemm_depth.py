"""GEMM speed by reduction depth K, relative to the catalog's reference GEMM.

A GEMM's output tiles each run a main loop over K and pay a fixed cost besides it: filling
the operand pipeline before the first MMA and writing the finished tile out after the last
(prologue and epilogue; NVIDIA, "Matrix Multiplication Background User's Guide", and
CUTLASS's kernel structure). A tile's time is then proportional to K + K0, where K0 is that
fixed cost expressed as the depth the main loop covers in the same time, and the GEMM runs
at K / (K + K0) of its deep-K rate. The catalog's `gemm_efficiency` is measured on deep GEMMs
(K = 8192 in most of its sources), so a GEMM of depth K runs at

    (K / (K + K0)) / (8192 / (8192 + K0))

of it: slower below 8192, slightly faster beyond. K0 is the GPU's catalog `gemm_k_overhead`
(0: no measurement, no change), fitted per GPU on measured GEMM sweeps (validation/fit_gemm_depth.py):
B200 390 (XLA's sm_100 table), A100 170 (Azure's ND A100 v4 cuBLASLt sweep). It grows with the
tensor-core rate per SM (the same fixed cycles cover more K) and with how little of a tile's
epilogue overlaps the next tile's main loop (Ampere's cuBLAS kernels are not persistent).
FP8 GEMMs pay it too, at FP8_K_OVERHEAD_RATIO times the 16-bit K0 (the same table's fp8 rows, below);
other precisions (fp32, tf32) keep 1.
"""

from __future__ import annotations

# K of the catalog's reference GEMM (compute.REFERENCE_GEMM: 8192^3 in most gemm_efficiency sources).
REFERENCE_DEPTH = 8192
# Precisions gemm_k_overhead was measured in (XLA's bf16xbf16->bf16 and f8e4m3fnxf8e4m3fn->bf16 tables; fp16
# runs bf16's MMA rate).
DEPTH_PRECISIONS = ("fp16", "bf16", "fp8")
# An FP8 GEMM's K0 over a 16-bit one's on the same GPU. XLA's sm_100 (B200) table (openxla/xla
# matmul_interpolator_data.h, kDefaultMatmulPTable, as mirrored in tensorflow/tensorflow) measures both on the
# same 12 GEMMs of 16384 rows, N 1024-4096, K 512-4096: fp8 (f8e4m3fn x f8e4m3fn -> bf16) 1712 / 2651 / 3122 /
# 3280 TFLOPS at N 4096, K 512 / 1024 / 2048 / 4096 (bf16 1091 / 1351 / 1540 / 1671), 1046 / 1869 / 2422 / 2662
# at N 1024. Fitted the same way as the 16-bit K0 (validation/fit_gemm_depth.py: least squares in log with the
# tile/wave model and the 3 us kernel cost), fp8 gives K0 = 500 and that copy of the table's bf16 rows 370:
# 1.35. rms 9.6% over the 12 (32% with no depth cost); not fitted, the table's 4096- and 8192-row fp8 GEMMs
# (M = tokens per GPU of the MLPerf 8B recipes) 8.9% and 6.7%. The fixed cycles cover more depth where the
# MMA does twice the work per cycle, though less than twice: 1.35, not 2.
FP8_K_OVERHEAD_RATIO = 1.35
# A depth that says "the data gradient": it reduces over the forward's n, each GEMM's own (a split GEMM's
# parts each over their own width, costs/projections.py); an int depth is that depth for every part.
DATA_GRADIENT = "n"


def depth_efficiency(k: int, k_overhead: float, precision: str = "bf16", kind: str = "gemm") -> float:
    """Rate of a depth-`k` GEMM over the reference GEMM's, with `k_overhead` (K0) per output tile
    (1 for convolutions: `kind` other than "gemm", their cuDNN kernels were not measured).

    >>> depth_efficiency(1024, 0.0)
    1.0
    >>> round(depth_efficiency(1024, 390.0), 3), round(depth_efficiency(8192, 390.0), 3)
    (0.759, 1.0)
    >>> depth_efficiency(24576, 390.0) > 1.0, depth_efficiency(1024, 390.0, "tf32")
    (True, 1.0)
    >>> depth_efficiency(1024, 390.0, "fp8") < depth_efficiency(1024, 390.0, "bf16")
    True
    """
    if k_overhead <= 0 or k <= 0 or precision not in DEPTH_PRECISIONS or kind != "gemm":
        return 1.0
    if precision == "fp8":
        k_overhead *= FP8_K_OVERHEAD_RATIO
    return (k / (k + k_overhead)) / (REFERENCE_DEPTH / (REFERENCE_DEPTH + k_overhead))


def depth_factor(op, gpu, precision: str, depth: int | str | None = None) -> float:
    """`depth_efficiency` of GEMM `op` on `gpu`: at its own k, at its own n (`DATA_GRADIENT`), or at
    `depth` (a backward GEMM's)."""
    k = op.gemm_mnk[2] if depth is None else op.gemm_mnk[1] if depth == DATA_GRADIENT else depth
    return depth_efficiency(k, gpu.gemm_k_overhead, precision, op.kind)


def backward_gemms(op, gpu, precision: str, batch: int) -> tuple[tuple[int, tuple[int, int]], ...]:
    """(depth, output rows x columns) of `op`'s two backward GEMMs where they run at other rates than its
    forward (a 16-bit or FP8 GEMM on a GPU with a measured `gemm_k_overhead`): the data gradient reduces over the
    forward's n into an output of the input's shape (tokens x k), the weight gradient over its m rows (tokens)
    into the weight's (k x n), each cut into its own tiles (split-K, which cuBLAS may run for a small output
    over a deep reduction, is not modelled). () otherwise: backward is twice the forward.

    >>> from scalesim.hardware import get_gpu
    >>> from scalesim.models.spec import OpSpec
    >>> op = OpSpec("qkv", "gemm", 2.0 * 64 * 3072 * 1024, 0.0, gemm_mnk=(64, 3072, 1024))
    >>> backward_gemms(op, get_gpu("b200"), "bf16", 2), backward_gemms(op, get_gpu("h100-sxm"), "bf16", 2)
    (((3072, (128, 1024)), (128, (1024, 3072))), ())
    """
    if op.kind != "gemm" or op.gemm_mnk is None or gpu.gemm_k_overhead <= 0 or precision not in DEPTH_PRECISIONS:
        return ()
    m, n, k = op.gemm_mnk
    return (n, (m * batch, k)), (m * batch, (k, n))
