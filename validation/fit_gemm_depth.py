"""Reproduce the catalog's B200 and A100 `gemm_k_overhead` (scalesim/hardware/data/gpus.yaml; scalesim/costs/gemm_depth.py).

Fitted on a microbenchmark, no validation case: XLA's default GEMM performance table, measured bf16 GEMM
throughput per compute capability (openxla/xla, mirrored in tensorflow/tensorflow at
third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, kDefaultMatmulPTable, key "sm_100",
flops "bf16xbf16->bf16"; a batched b x m x n x k GEMM is b*m rows here). K0 is the least-squares value (in
log) over the 12 GEMMs of 16384 rows, N 1024-4096, K 512-4096, closest to the GEMMs of the training steps it
serves (BERT-large on 8x B200: 24576 rows); the 24 GEMMs of 8192 rows are printed as a check it was not fitted
on. Each prediction is scalesim's own: the catalog's large-GEMM rate, the tile/wave shape model, the depth
factor and the per-kernel cost (a GEMM benchmark's time includes its launch and tail).

A100 (small12): Azure's cuBLASLt FP16 sweep on ND A100 v4 (A100-SXM4-80GB, CUDA 12.5; Azure/AI-benchmarking-guide
Azure_Results/ND_A100_v4_results.md @3bb66ca). Its absolute rate (253.7 TFLOPS at 8192^3) is below the catalog's
mamf-finder figure, so each GEMM is compared relative to the same table's 8192^3, the reference GEMM; a GEMM near
the A100's ridge (802816 x 192 x 768) takes the larger of its compute and operand-traffic times, as op_time_s does.
K0 is fitted on the GEMMs that run 100 us or more; the shorter ones (launch and wave quantization, which the depth
term does not address) are printed as a check.

    PYTHONPATH=. python validation/fit_gemm_depth.py
"""

from __future__ import annotations

import math
from dataclasses import replace

from scalesim.costs.compute import KERNEL_OVERHEAD_S, achieved_peak_flop_per_s, relative_shape_efficiency
from scalesim.costs.gemm_depth import depth_efficiency
from scalesim.hardware import get_gpu

# TFLOP/s measured, {(N, K): value} per row count (b x m); sm_100 (B200) entries of the table.
SM100 = {
    16384: {(4096, 512): 1092.4, (4096, 1024): 1350.4, (4096, 2048): 1544.0, (4096, 4096): 1690.7,
            (2048, 512): 903.4, (2048, 1024): 1148.5, (2048, 2048): 1329.2, (2048, 4096): 1458.4,
            (1024, 512): 760.8, (1024, 1024): 1039.2, (1024, 2048): 1268.9, (1024, 4096): 1394.5},
    8192: {(4096, 512): 898.7, (4096, 1024): 1142.6, (4096, 2048): 1338.5, (4096, 4096): 1462.7,   # b 4, m 2048
           (2048, 512): 772.3, (2048, 1024): 1038.2, (2048, 2048): 1276.2, (2048, 4096): 1411.1,
           (1024, 512): 611.3, (1024, 1024): 868.7, (1024, 2048): 1127.2, (1024, 4096): 1341.5},
    -8192: {(4096, 512): 902.8, (4096, 1024): 1153.4, (4096, 2048): 1337.9, (4096, 4096): 1455.7,  # b 2, m 4096
            (2048, 512): 766.9, (2048, 1024): 1045.8, (2048, 2048): 1276.5, (2048, 4096): 1411.8,
            (1024, 512): 613.4, (1024, 1024): 877.8, (1024, 2048): 1131.3, (1024, 4096): 1339.6},
}

# FP8 (bwsmall): the same table's f8e4m3fnxf8e4m3fn->bf16 rows of sm_100, from a later copy of the file (stored
# copy read Dec 2026; its bf16 rows differ from SM100's above by up to 3%, so the bf16 rows of that copy are kept
# beside them and the fp8 K0 is taken relative to them: FP8_K_OVERHEAD_RATIO in scalesim/costs/gemm_depth.py).
SM100_FP8 = {
    16384: {(4096, 512): 1712.2, (4096, 1024): 2651.2, (4096, 2048): 3122.5, (4096, 4096): 3279.7,   # b 4, m 4096
            (2048, 512): 1534.9, (2048, 1024): 2400.8, (2048, 2048): 2884.9, (2048, 4096): 3133.3,
            (1024, 512): 1046.3, (1024, 1024): 1868.7, (1024, 2048): 2422.3, (1024, 4096): 2662.0},
    8192: {(4096, 1024): 2398.1, (4096, 2048): 2895.1, (4096, 4096): 3131.4, (2048, 2048): 2416.5,    # b 4, m 2048
           (2048, 4096): 2788.9, (1024, 1024): 1365.9, (1024, 2048): 1898.7, (1024, 4096): 2472.6},
    4096: {(4096, 1024): 1895.4, (4096, 2048): 2485.0, (4096, 4096): 2765.0, (2048, 1024): 1332.2,    # b 1, m 4096
           (2048, 2048): 1833.5, (2048, 4096): 2499.4, (1024, 4096): 1951.8},
}
SM100_BF16_SAME_COPY = {(4096, 512): 1090.6, (4096, 1024): 1350.5, (4096, 2048): 1539.9, (4096, 4096): 1670.5,
                        (2048, 512): 913.2, (2048, 1024): 1163.1, (2048, 2048): 1345.8, (2048, 4096): 1465.7,
                        (1024, 512): 801.2, (1024, 1024): 1060.5, (1024, 2048): 1265.2, (1024, 4096): 1411.9}

# TFLOP/s measured, {(M, N, K): value}; Azure ND A100 v4, cuBLASLt FP16, random inputs, 10,000 warm-up iterations.
A100_AZURE = {(1024, 1024, 1024): 119.4, (2048, 2048, 2048): 221.8, (4096, 4096, 4096): 228.0,
              (8192, 8192, 8192): 253.7, (16384, 16384, 16384): 256.5, (1024, 2145, 1024): 132.8,
              (6144, 12288, 12288): 250.8, (802816, 192, 768): 157.8}
A100_REFERENCE = (8192, 8192, 8192)
A100_MIN_S = 100e-6        # GEMMs shorter than this are launch- and wave-bound: checked, not fitted


def predicted_tflops(gpu, rows: int, n: int, k: int, k_overhead: float) -> float:
    flop = 2.0 * rows * n * k
    rate = (achieved_peak_flop_per_s(gpu, "bf16") * relative_shape_efficiency(rows, n, gpu)
            * depth_efficiency(k, k_overhead, "bf16"))
    return flop / (flop / rate + KERNEL_OVERHEAD_S) / 1e12


def rms_log_error(gpu, sets, k_overhead: float) -> float:
    errors = [math.log(predicted_tflops(gpu, abs(rows), n, k, k_overhead) / value)
              for rows in sets for (n, k), value in SM100[rows].items()]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def a100_seconds(gpu, m: int, n: int, k: int, k_overhead: float) -> float:
    flop = 2.0 * m * n * k
    rate = (achieved_peak_flop_per_s(gpu, "fp16") * relative_shape_efficiency(m, n, gpu)
            * depth_efficiency(k, k_overhead, "fp16"))
    operands_s = (m * k + k * n + m * n) * 2 / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)
    return max(flop / rate, operands_s) + KERNEL_OVERHEAD_S


def a100_rms_log_error(gpu, shapes, k_overhead: float) -> float:
    reference = 2.0 * math.prod(A100_REFERENCE) / a100_seconds(gpu, *A100_REFERENCE, k_overhead)
    errors = [math.log(2.0 * math.prod(s) / a100_seconds(gpu, *s, k_overhead) / reference
                       / (A100_AZURE[s] / A100_AZURE[A100_REFERENCE])) for s in shapes]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def fit_a100() -> None:
    gpu = replace(get_gpu("a100-80gb-sxm"), training_clock_fraction=1.0)
    others = [s for s in A100_AZURE if s != A100_REFERENCE]
    long = [s for s in others if 2.0 * math.prod(s) / (A100_AZURE[s] * 1e12) >= A100_MIN_S]
    short = [s for s in others if s not in long]
    fitted = min(range(0, 1001, 10), key=lambda k0: a100_rms_log_error(gpu, long, k0))
    print(f"A100 gemm_k_overhead fitted on the {len(long)} GEMMs of 100 us or more: {fitted} "
          f"(rms {a100_rms_log_error(gpu, long, fitted):.3f}, without the depth term {a100_rms_log_error(gpu, long, 0):.3f})")
    print(f"check on the {len(short)} shorter GEMMs: rms {a100_rms_log_error(gpu, short, fitted):.3f} "
          f"(without {a100_rms_log_error(gpu, short, 0):.3f}); catalog value {get_gpu('a100-80gb-sxm').gemm_k_overhead:g}")


def fp8_rms_log_error(gpu, table: dict, rows: int, k_overhead: float, precision: str) -> float:
    """rms log error over `table` (rows x N x K GEMMs) with the raw K0 `k_overhead` (no fp8 ratio applied)."""
    def tflops(n: int, k: int) -> float:
        flop = 2.0 * rows * n * k
        rate = (achieved_peak_flop_per_s(gpu, precision) * relative_shape_efficiency(rows, n, gpu)
                * depth_efficiency(k, k_overhead, "bf16"))
        return flop / (flop / rate + KERNEL_OVERHEAD_S) / 1e12
    errors = [math.log(tflops(n, k) / value) for (n, k), value in table.items()]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def fit_fp8(gpu) -> None:
    bf16 = min(range(0, 1001, 10), key=lambda k0: fp8_rms_log_error(gpu, SM100_BF16_SAME_COPY, 16384, k0, "bf16"))
    fp8 = min(range(0, 1001, 10), key=lambda k0: fp8_rms_log_error(gpu, SM100_FP8[16384], 16384, k0, "fp8"))
    print(f"fp8 K0 on the same 12 GEMMs: {fp8} (rms {fp8_rms_log_error(gpu, SM100_FP8[16384], 16384, fp8, 'fp8'):.3f}, "
          f"without {fp8_rms_log_error(gpu, SM100_FP8[16384], 16384, 0, 'fp8'):.3f}); that copy's bf16 rows: {bf16}; "
          f"ratio {fp8 / bf16:.2f}")
    for rows in (8192, 4096):
        print(f"  check on the {rows}-row fp8 GEMMs: rms {fp8_rms_log_error(gpu, SM100_FP8[rows], rows, fp8, 'fp8'):.3f} "
              f"(without {fp8_rms_log_error(gpu, SM100_FP8[rows], rows, 0, 'fp8'):.3f})")


def main() -> None:
    gpu = replace(get_gpu("b200"), training_clock_fraction=1.0)     # a benchmark runs at its own clock
    fitted = min(range(0, 1001, 10), key=lambda k0: rms_log_error(gpu, (16384,), k0))
    print(f"gemm_k_overhead fitted on 16384-row GEMMs: {fitted} "
          f"(rms {rms_log_error(gpu, (16384,), fitted):.3f}, without the depth term {rms_log_error(gpu, (16384,), 0):.3f})")
    print(f"check on the 8192-row GEMMs: rms {rms_log_error(gpu, (8192, -8192), fitted):.3f} "
          f"(without {rms_log_error(gpu, (8192, -8192), 0):.3f}); catalog value {get_gpu('b200').gemm_k_overhead:g}")
    fit_fp8(gpu)
    fit_a100()


if __name__ == "__main__":
    main()
