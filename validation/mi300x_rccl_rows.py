"""Reproduce the figures behind the 8x MI300X all-reduce cases' dispute and notes.

    python validation/mi300x_rccl_rows.py

Two rccl-tests in-place all-reduce curves of one 8x MI300X board, both RCCL 2.22.3-develop:
Azure's ND MI300X v5 page (cases/azure-nd-mi300x.yaml; its harness runs all_reduce_perf -g 8, one
thread driving the eight GPUs) and AMD's ROCm blog run on bare metal with one process per GPU
(cases/amd-rocm-blog-mi300x.yaml; mpirun -np 8 ... -g 1, no graph). For each size this prints both
calls' times (the page's from its busbw: size x 2(n-1)/n / busbw; the blog's as printed), the
difference, and the rate at which the blog's next row adds its extra bytes (busbw-equivalent),
in place and out of place: below 32 MiB RCCL runs MSCCL's all-pairs algorithms, from 32 MiB the ring.
"""

from __future__ import annotations

PAGE = "samuel-bohman/AI-benchmarking-guide Azure_Results/ND_MI300X_v5_results.md @3de0c294"
BLOG = "ROCm/rocm-blogs blogs/software-tools-optimization/mi300x-rccl-xgmi/README.md @0e81c2ca"
# 1 KiB, 2 KiB, ..., 8 GiB (24 rows). The page: busbw in GB/s. The blog: in-place time in us.
PAGE_BUSBW = (0.04, 0.07, 0.15, 0.29, 0.59, 1.13, 2.22, 4.18, 7.50, 13.01, 22.41, 43.41, 82.53, 131.57, 171.46,
              230.35, 266.34, 290.81, 302.80, 308.89, 313.92, 315.06, 314.85, 316.82)
BLOG_US = (12.79, 12.96, 12.71, 12.89, 13.01, 13.10, 13.38, 13.77, 16.55, 23.88, 27.13, 34.84, 129.0, 86.67, 155.6,
           256.0, 440.6, 805.8, 1546.0, 3034.2, 5974.5, 11895, 23769, 47323)
# The blog's out-of-place times from 1 to 32 MiB (its in-place 4 MiB row, 129.0 us, is an outlier).
BLOG_OOP_US = {1 << 20: 27.42, 2 << 20: 34.81, 4 << 20: 51.72, 8 << 20: 83.68, 16 << 20: 148.8, 32 << 20: 244.1}
BUS = 2 * 7 / 8                      # all-reduce bus factor on 8 ranks (rccl-tests)


def main() -> None:
    print(f"page: {PAGE}\nblog: {BLOG}")
    print(f"{'size':>10} {'page us':>9} {'blog us':>9} {'extra us':>9} {'blog busbw':>10} {'next-row rate':>13}")
    for i, (busbw, blog_us) in enumerate(zip(PAGE_BUSBW, BLOG_US)):
        size = 1 << (10 + i)
        page_us = size * BUS / (busbw * 1e3)
        rate = ""
        if i + 1 < len(BLOG_US) and BLOG_US[i + 1] > blog_us:
            rate = f"{size * BUS / ((BLOG_US[i + 1] - blog_us) * 1e3):.0f}"
        print(f"{size:>10} {page_us:>9.1f} {blog_us:>9.1f} {page_us - blog_us:>9.1f} "
              f"{size * BUS / (blog_us * 1e3):>10.2f} {rate:>13}")
    print("blog, out of place: the rate at which each row adds the bytes of the one before")
    sizes = sorted(BLOG_OOP_US)
    for small, large in zip(sizes, sizes[1:]):
        rate = small * BUS / ((BLOG_OOP_US[large] - BLOG_OOP_US[small]) * 1e3)
        print(f"  {small >> 20:>2} -> {large >> 20:>2} MiB: {rate:.0f} GB/s of busbw")


if __name__ == "__main__":
    main()
