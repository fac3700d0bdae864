"""Reproduce the figures behind the Azure AI-benchmarking-guide all-reduce cases' dispute and notes.

    python validation/azure_page_rows.py

The guide's pages list nccl-tests (rccl-tests) in-place all-reduce bus bandwidth on one 8-GPU VM,
1 KiB to 8 GiB (validation/cases/azure-ai-benchmarking-guide.yaml, azure-nd-mi300x.yaml; rows copied
below with their source). For every row this prints the call's time (size x 2(n-1)/n / busbw), and the
rate at which the next row (twice the bytes) adds its extra bytes, as a multiple of the page's own
8 GiB bus bandwidth. Between two sizes the library runs with the same algorithm and protocol, that
rate cannot beat the page's large-message bandwidth unless the smaller call carries time the larger
one does not. The dispute rule (azure-nd-a100x8-allreduce-128M): a case row above twice the page's
1 KiB time (the -g 8 host floor) whose next row, same algorithm and protocol by NCCL's tuner, is more
than 10% faster than the 8 GiB bus bandwidth. The protocol column is NCCL 2.18.5's ring choice on
8x A100 (tuning.cc: LL 6.6 + 14 x 0.6 us at 60 GB/s busBw, LL128 14 + 14 x 1.9 us at 220.8, Simple
8.4 + 14 x 3.4 us at 240); the H100/H200 pages ran NCCL_ALGO=NVLS (Simple only); RCCL is not checked.
"""

from __future__ import annotations

A100 = "Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md @8fd0c6e1"
H100 = "Azure/AI-benchmarking-guide Azure_Results/ND_H100_v5_results.md @8fd0c6e1"
H200 = "Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md @8fd0c6e1"
MI300X = "samuel-bohman/AI-benchmarking-guide Azure_Results/ND_MI300X_v5_results.md @3de0c294"
# busbw in GB/s for 1 KiB, 2 KiB, ..., 8 GiB (24 rows; the pages label them 1K ... 65K, 132K ... 8G).
PAGES = {
    A100: (0.04, 0.08, 0.17, 0.33, 0.67, 1.37, 2.70, 5.15, 10.11, 19.24, 36.22, 53.54, 71.43, 89.99, 109.22,
           132.77, 166.63, 174.18, 213.87, 221.58, 228.10, 230.22, 230.48, 231.58),
    H100: (0.07, 0.14, 0.27, 0.53, 0.95, 1.71, 2.72, 5.40, 10.86, 21.35, 43.70, 81.93, 128.73, 172.13, 234.45,
           295.53, 361.78, 400.61, 423.38, 438.46, 466.35, 472.36, 475.54, 478.87),
    H200: (0.06, 0.12, 0.23, 0.47, 0.93, 1.84, 3.72, 7.39, 14.75, 29.38, 52.96, 88.78, 138.44, 181.94, 240.41,
           300.91, 368.11, 412.45, 432.24, 442.72, 467.58, 472.57, 477.41, 479.98),
    MI300X: (0.04, 0.07, 0.15, 0.29, 0.59, 1.13, 2.22, 4.18, 7.50, 13.01, 22.41, 43.41, 82.53, 131.57, 171.46,
             230.35, 266.34, 290.81, 302.80, 308.89, 313.92, 315.06, 314.85, 316.82),
}
CASE_SIZES = (20, 24, 27, 30)        # log2 bytes of the cases' rows that have a next row: 1M, 16M, 128M, 1G
BUS = 2 * 7 / 8                      # all-reduce bus factor on 8 ranks (nccl-tests)


def a100_protocol(size: int) -> str:
    """NCCL 2.18.5's ring protocol on 8x A100 (NVSwitch, 12 graph channels at 20 GB/s): least modelled time."""
    models = {"LL": (6.6 + 14 * 0.6, 60.0), "LL128": (14 + 14 * 1.9, 220.8), "Simple": (8.4 + 14 * 3.4, 240.0)}
    return min(models, key=lambda p: models[p][0] + size * BUS / (models[p][1] * 1e3))


def time_us(size: int, busbw: float) -> float:
    return size * BUS / (busbw * 1e3)


def main() -> None:
    for page, rows in PAGES.items():
        peak, floor = rows[-1], time_us(1024, rows[0])
        print(f"{page}\n  8 GiB busbw {peak} GB/s, 1 KiB time {floor:.0f} us")
        for i, busbw in enumerate(rows[:-1]):
            size = 1 << (10 + i)
            if size < 1 << 20:
                continue
            t, t_next = time_us(size, busbw), time_us(2 * size, rows[i + 1])
            rate = size * BUS / ((t_next - t) * 1e3)
            same = a100_protocol(size) == a100_protocol(2 * size) if page == A100 else page in (H100, H200)
            flagged = (size.bit_length() - 1 in CASE_SIZES and t > 2 * floor and same and rate > 1.1 * peak)
            proto = f" {a100_protocol(size):6s}" if page == A100 else ""
            print(f"  {size / 2**20:6g} MiB{proto} {t:8.0f} us, beyond the 8 GiB rate {t - time_us(size, peak):5.0f} us;"
                  f" next row adds its bytes at {rate:6.1f} GB/s = {rate / peak:4.2f}x{'  DISPUTED' if flagged else ''}")


if __name__ == "__main__":
    main()
