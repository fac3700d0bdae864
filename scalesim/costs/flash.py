"""Flash-attention kernels: the fraction of peak they reach, under a causal mask, and in backward.

Forward: a kernel generation's efficiency per architecture (`flash_efficiency`), from the
papers' forward figures on 128-wide heads without a mask (head shapes other than 128/128:
costs/head_dims.py).

Causal masks: the kernels skip the masked tiles, but do not reach their full-mask rate on the
rest (tiles on the diagonal are half wasted, and query blocks of unequal length leave SMs idle
at the end). Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608, Fig. 5: H100 80GB SXM5,
forward, head dim 128, batch x seqlen = 16k) measure each kernel with and without the mask;
the ratio of causal to full-mask TFLOPS (both counting the work done: half the s^2 when causal)
grows with the sequence and is alike for FlashAttention-2, FlashAttention-3 and cuDNN
(CAUSAL_RATE: their mean per length), taken to hold in backward too (an assumption: the
same tiles are skipped). Other architectures: no such pair here, so 1.0.

Backward, two published facts:
- work: flash attention keeps no score matrix, so its backward recomputes S = QK^T before the
  four gradient GEMMs (dV, dP, dQ, dK): five GEMMs against the forward's two, 2.5x the forward
  FLOP. FlashAttention's own benchmark counts it so (Dao-AILab/flash-attention
  benchmarks/benchmark_flash_attention.py @c082294e: `2.5 * f if mode == "bwd"`, 3.5 f for
  forward + backward), and the papers' efficiencies are measured against that count;
- rate: per FLOP so counted, the backward kernels run slower than the forward. Shah et al.
  2024 (FlashAttention-3, arXiv 2407.08608, Figs. 5a and 6: H100 80GB SXM5, head dim 128,
  seqlen 16k, BF16/FP16) measure forward / backward 370 / 322 TFLOPS for FlashAttention-2,
  648 / 561 for FlashAttention-3 and 595 / 516 for cuDNN: 0.87 for all three kernels. Blackwell
  (B200), FlashAttention-4, head dim 128, causal, seqlen 8192: forward 1418.1, backward 1208.6
  TFLOPS (Dao-AILab/flash-attention pull request #2280, the benchmark costs/head_dims.py cites):
  0.85. Ampere and Ada: no same-benchmark pair found here, so no change (1.0).

AMD Instinct (CDNA3: MI300X, MI325X; CDNA4: MI355X) publishes both passes on a training shape:
ROCm/aiter op_tests/cpp/mha/README.md @0403bcdfd0b507e0459012b82e00785a818f774a (table added by
ROCm/aiter pull request #1270, Oct 2025), the hand-written assembly ("v3") kernels Transformer
Engine on ROCm runs with NVTE_CK_USES_FWD_V3=1 / NVTE_CK_USES_BWD_V3=1 (AMD's MLPerf Training v5.1
configs, e.g. mlcommons/training_results_v5.1 AMD/benchmarks/llama2_70b_lora/implementations/
MI300X_EPYC_9575F_pytorch_llama2_70b/config_MI300X_1x8x1.sh, with NVTE_CK_IS_V3_ATOMIC_FP32=0: the
16-bit-atomic backward, "BWD-a16"). BF16, head dim 128, GQA 64/8 heads, batch 1, sequence 8192,
causal (Llama 2 70B's shape), FLOP counted as above: MI300X forward 518.29, backward 481.895 TFLOPS;
MI355X 1300.105 and 1064.56, over dense BF16 peaks of 1307.4 (MI300X, MI325X: same compute die) and
2516.6. Like the FlashAttention papers' figures, they are taken at the peak clock (short runs: aiter's
benchmark times 20 iterations after 5 warm-up ones by default); a training step runs
them at the clock the part holds (its training_clock_fraction: MI300X 1207 and MI325X 1447 of 2100 MHz,
AMD's measured median under dense matrix work; hardware/data/gpus.yaml). Those rows are causal, so CDNA takes them as its rates with no CAUSAL_RATE on top; the same
table's other causal rows at 8192 tokens lie within 6% of them, its full-mask rows ~10% faster.
The same table's batch-1 64/8-head rows at other lengths, causal and full-mask (AMD_FLASH_TFLOPS),
set the rate of a kernel that runs another length or mask (length_rate): the kernels are slower on
short sequences (MI300X causal 2048 tokens: forward 392, backward 280 TFLOPS), which is what
context parallelism's ring steps run (costs/context_chunks.py).

FP8 attention (Transformer Engine's FP8 dot-product attention on cuDNN, NeMo's
`fp8_dot_product_attention`, FP8_DPA=1 in NVIDIA's MLPerf Training Llama 2 70B LoRA configs,
mlcommons/training_results_v4.0 NVIDIA/benchmarks/llama2_70b_lora/implementations/nemo/configs/
config_common.sh, with NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0: the cuDNN kernels): the forward runs
faster than the 16-bit one by FP8_FORWARD_SPEEDUP, cuDNN's FP8 over cuDNN's BF16 rate on the same
benchmark (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608: Fig. 7 FP8 forward and Fig. 5b
BF16 forward, H100 80GB SXM5, head dim 128, no mask, batch x seqlen = 16k; TFLOPS at 512 ... 16k:
FP8 617 751 886 864 971 1005, BF16 497 574 617 609 600 595). The backward stays at the 16-bit
rate: that config also sets NVTE_FP8_DPA_BWD=1 (an FP8 backward), but no FP8 backward rate is
published for Hopper (FlashAttention-3's FP8 kernel is forward-only), so that speed-up is not
counted: an under-estimate of FP8 attention's gain, said so where a case runs it.
Blackwell: NVIDIA's cuDNN SDPA training benchmark publishes both passes in FP8 and BF16 on GB200
(NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260424_100750.csv
@60e572b7: cuDNN 9.22, batch 2, 64 query and 8 key/value heads, head dim 128, the Llama 70B shape, no
mask, TFLOPS at 2k ... 32k: forward FP8 1881 2093 2241 2263 2223, BF16 1433 1599 1771 1697 1634;
backward (NVTE_FP8_DPA_BWD's FP8 kernel) FP8 1214 1577 1772 1836 1825, BF16 1124 1350 1404 1374
1262), so there both passes run faster, by that table's FP8 over BF16 ratio with the op's mask
(costs/part_attention.py fp8_over_bf16, which holds the table). A part the same benchmark measures against
GB200 (GB300) runs at its own rate, each context-parallel ring step at its own length: costs/part_attention.py.
"""

from __future__ import annotations

import math

from scalesim.hardware import GpuSpec, gpus

# Fraction of the dense peak flash attention's forward reaches.
# Dao 2023, FlashAttention-2: 50-73% of peak on A100 (midpoint 0.62; Ada runs
# the same kernels). Shah et al. 2024, FlashAttention-3: FA2 reaches 35% on
# H100 and FA3 75%; frameworks use either (PyTorch SDPA: FA2; Transformer
# Engine/cuDNN: FA3-class), so Hopper and Blackwell take 0.5, an estimate.
FLASH_ATTENTION_EFFICIENCY = {"ampere": 0.62, "ada": 0.62, "hopper": 0.5, "blackwell": 0.5,
                              "cdna3": 518.29 / 1307.4, "cdna4": 1300.105 / 2516.6}   # AMD: docstring
# triton: the Triton FlashAttention of HazyResearch's flash_attn_triton.py (flash-attn v1.0.x;
# llm-foundry ships a copy as llmfoundry/models/layers/flash_attn_triton.py and runs it for MPT's
# ALiBi bias, `attn_impl: triton`). Its forward + backward rate on A100 80GB SXM4, head dim 128,
# TFLOPS counted as FlashAttention's benchmark counts them (3.5 forward FLOP, half the s^2 under a
# causal mask): Dao 2023, FlashAttention-2, Fig. 4 (Dao-AILab/flash-attention
# assets/flash2_a100_fwd_bwd_benchmark.png @4f285b35), "FlashAttention Triton" bars at 512 ... 16k.
# Only the combined rate is published, so the forward and the backward each take it (a forward
# recomputed under activation checkpointing runs at it too; the kernel's header says its forward
# is the faster half). Without ALiBi's bias loads, which the figure does not run.
_TRITON_A100 = {True: ((512, 50), (1024, 61), (2048, 68), (4096, 74), (8192, 78), (16384, 80)),
                False: ((512, 78), (1024, 85), (2048, 90), (4096, 93), (8192, 95), (16384, 95))}
# The same figure's FlashAttention-2 bars (head dim 128; without the mask the 512 and 1k labels are
# hidden by the legend, so that row starts at 2k and is held below it). They scale the Ampere flash
# kernels' efficiency by length, taken as the causal 16k rate (flash and flash2 on A100).
FLASH2_FWD_BWD_TFLOPS = {"ampere": {True: ((512, 99), (1024, 133), (2048, 155), (4096, 173), (8192, 182), (16384, 189)),
                                    False: ((2048, 187), (4096, 196), (8192, 201), (16384, 203))}}
# Ada (sm_89) runs the same sm_80 kernels (flash-attn builds sm_80 and sm_90 code; PyTorch SDPA's copy too), so its
# rate by length and mask is taken relative, as the A100's: at 1k tokens causal 133/189 = 0.70 of the 16k rate (small12).
FLASH2_FWD_BWD_TFLOPS["ada"] = FLASH2_FWD_BWD_TFLOPS["ampere"]
# Hopper: no H100 rate of this kernel is published. The Triton it runs under (llm-foundry's
# triton-pre-mlir, vchiley/triton branch triton_pre_mlir_sm90: the pre-MLIR compiler of
# flash-attn v1's triton==2.0.0.dev20221202, with only its PTX target raised to sm_90, commits
# 808e5642 and 25cecaaf) emits Ampere's mma.sync m16n8k16 on any sm >= 80
# (lib/codegen/selection/generator.cc visit_mma16816), never Hopper's wgmma. Kernels built on those
# instructions run about 1.7x their A100 rate on the H100: the FlashAttention-2 paper measures two,
# forward + backward, head dim 128, on both GPUs with one benchmark (Fig. 4 A100 80GB SXM4, above;
# Fig. 7, Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png @4f285b35, H100 80GB
# SXM5). SM80_ON_HOPPER: TFLOPS at 512 ... 16k of FlashAttention (v1) and FlashAttention-2, (A100, H100)
# per mask. The Triton kernel's H100 rate is its A100 rate times the two kernels' mean ratio at each
# length and mask (FlashAttention-2's full-mask A100 labels at 512 and 1k are hidden: v1's alone).
SM80_ON_HOPPER = {
    "flash1": {True: ((55, 62, 69, 76, 80, 83), (98, 109, 108, 126, 135, 137)),
               False: ((76, 72, 76, 80, 82, 83), (127, 127, 128, 131, 137, 139))},
    "flash2": {True: ((99, 133, 155, 173, 182, 189), (163, 221, 265, 294, 308, 328)),
               False: ((None, None, 187, 196, 201, 203), (248, 294, 320, 326, 335, 338))},
}


def _hopper_speedup(causal: bool, index: int) -> float:
    """Mean H100-over-A100 rate of the Ampere-instruction flash kernels at one length (SM80_ON_HOPPER)."""
    ratios = [h[index] / a[index] for a, h in (k[causal] for k in SM80_ON_HOPPER.values()) if a[index]]
    return sum(ratios) / len(ratios)


TRITON_FWD_BWD_TFLOPS = {
    "ampere": _TRITON_A100,
    "hopper": {causal: tuple((seq, round(rate * _hopper_speedup(causal, i), 1)) for i, (seq, rate) in enumerate(rows))
               for causal, rows in _TRITON_A100.items()},
}
# The dense 16-bit peak each table's rates are a fraction of (A100 SXM4 312, H100 SXM5 989.4 TFLOPS).
TRITON_PEAK_TFLOPS = {"ampere": 312, "hopper": 989.4}
# A scenario that knows its kernels says so: flash2 (FlashAttention-2, e.g. PyTorch
# SDPA, 2023-era stacks) or flash3 (FlashAttention-3 / cuDNN-class, Hopper only),
# with the papers' figures; no measurement, no entry (such a scenario is refused).
# Hopper: FA3 paper Fig. 5b, head dim 128, no mask, seqlen 16k: FA2 370, FA3 648 TFLOPS
# of the H100 SXM5's 989 (the abstract's 35% and 75% are FA2's shorter runs and FA3 at head dim 256).
FLASH_KERNEL_EFFICIENCY = {
    "flash2": {"ampere": 0.62, "ada": 0.62, "hopper": round(370 / 989, 3)},
    "flash3": {"hopper": round(648 / 989, 3)},
    "triton": {arch: table[True][-1][1] / TRITON_PEAK_TFLOPS[arch] for arch, table in TRITON_FWD_BWD_TFLOPS.items()},
}
FLASH_KINDS = ("flash", *FLASH_KERNEL_EFFICIENCY)

# Causal over full-mask rate by sequence length, Hopper (FA3 paper Fig. 5b vs 5e, TFLOPS at
# 512 ... 16k): FA2 191/309 260/350 298/362 319/368 333/370 335/370; cuDNN 315/497 410/574
# 484/617 518/609 529/600 539/595; FA3 292/467 423/565 521/625 579/638 602/646 616/648.
CAUSAL_RATE = {"hopper": ((512, 0.626), (1024, 0.735), (2048, 0.814), (4096, 0.875),
                          (8192, 0.905), (16384, 0.921))}

# AMD's asm kernels by length, batch 1, 64 query and 8 key/value heads, head dim 128, BF16, TFLOPS
# (ROCm/aiter op_tests/cpp/mha/README.md, module docstring): (seq, forward, backward-a16) per mask.
AMD_FLASH_TFLOPS = {
    "cdna3": {True: ((1024, 228.54, 283.58), (2048, 392.425, 279.72), (4096, 474.385, 420.265),
                     (8192, 518.29, 481.895), (10240, 510.895, 501.055), (16384, 541.55, 458.075)),
              False: ((1024, 418.36, 292.68), (2048, 485.45, 437.26), (4096, 546.34, 524.33),
                      (8192, 591.37, 473.0), (10240, 572.09, 503.78), (16384, 547.78, 519.21))},
    "cdna4": {True: ((1024, 432.565, 386.805), (2048, 936.435, 725.61), (4096, 1046.085, 941.16),
                     (8192, 1300.105, 1064.56), (10240, 1338.005, 1092.475), (16384, 1392.485, 1162.805)),
              False: ((1024, 1003.73, 806.07), (2048, 1018.07, 965.91), (4096, 1305.83, 1140.11),
                      (8192, 1412.91, 1159.28), (10240, 1417.43, 1195.97), (16384, 1437.62, 1212.72))},
}
AMD_REFERENCE = (8192, True)     # the row FLASH_ATTENTION_EFFICIENCY and BACKWARD_RELATIVE_RATE take

# FP8 over BF16 forward rate of cuDNN's flash attention by sequence length (module docstring).
FP8_FORWARD_SPEEDUP = {"hopper": ((512, round(617 / 497, 3)), (1024, round(751 / 574, 3)),
                                  (2048, round(886 / 617, 3)), (4096, round(864 / 609, 3)),
                                  (8192, round(971 / 600, 3)), (16384, round(1005 / 595, 3)))}
# No FP8 backward rate is published for Hopper: its backward runs at the 16-bit rate (fp8_speedup). Blackwell's
# FP8 rates, both passes and both masks, are cuDNN's GB200 table itself (costs/part_attention.py fp8_over_bf16).

# Blackwell parts whose chip cuDNN's FP8 table measures (GB200, sm_100) or that run its kernels (B200,
# B300, GB300: sm_100/sm_103). The GB202 parts (RTX 5090, RTX PRO 6000: sm_120) run no FP8 attention:
# Transformer Engine disables its flash and fused (cuDNN) backends for FP8 attention on sm_120, and its
# unfused one for FP8 unless emulated, then raises "No dot product attention backend is available"
# (NVIDIA/TransformerEngine @d0067d0, transformer_engine/pytorch/attention/dot_product_attention/
# utils.py get_attention_backend and dot_product_attention.py).
FP8_ATTENTION_PARTS = {"blackwell": ("b200", "gb200", "b300", "gb300")}

FLASH_BACKWARD_FLOP_RATIO = 2.5            # backward FLOP over forward FLOP (module docstring)
# Backward throughput over forward throughput (FLOP counted as above), per architecture.
BACKWARD_RELATIVE_RATE = {"hopper": round(322 / 370, 2),      # 0.87; FA3 561/648 and cuDNN 516/595 agree
                          "blackwell": round(1208.6 / 1418.1, 2),  # 0.85
                          "cdna3": 481.895 / 518.29, "cdna4": 1064.56 / 1300.105}  # AMD's asm kernels


def flash_efficiency(gpu: GpuSpec, attention: str) -> float:
    """Fraction of the 16-bit peak a flash-attention kernel's forward reaches on this GPU's architecture."""
    if attention == "flash":
        return FLASH_ATTENTION_EFFICIENCY.get(gpu.arch, 0.5)
    table = FLASH_KERNEL_EFFICIENCY[attention]
    if gpu.arch not in table:
        raise ValueError(f"no published {attention} efficiency for {gpu.arch} GPUs ({gpu.full_name}); "
                         f"{attention} is known on: {', '.join(table)}; use flash")
    return table[gpu.arch]


def backward_over_forward(arch: str, attention: str = "flash") -> float:
    """How many times its forward time a flash-attention backward takes on `arch` (on Ampere no backward
    rate apart: its FLOP ratio; the Triton kernel's one rate is forward + backward, so its FLOP ratio anywhere).

    >>> backward_over_forward("hopper") > backward_over_forward("ampere") == backward_over_forward("hopper", "triton") == 2.5
    True
    """
    if attention == "triton":
        return FLASH_BACKWARD_FLOP_RATIO
    return FLASH_BACKWARD_FLOP_RATIO / BACKWARD_RELATIVE_RATE.get(arch, 1.0)


def kernel_length_rate(attention: str, arch: str, seq: int, causal: bool) -> float:
    """The kernel's rate at `seq` tokens over the rate its efficiency stands for (its causal 16k rate
    in the FlashAttention-2 paper's Fig. 4, and for the Triton kernel on Hopper that times the
    Ampere-instruction kernels' H100 gain: TRITON_FWD_BWD_TFLOPS, FLASH2_FWD_BWD_TFLOPS); 1.0 for
    kernels and architectures without a table by length.

    >>> kernel_length_rate("triton", "ampere", 2048, True), round(kernel_length_rate("flash2", "ampere", 2048, True), 3)
    (0.85, 0.82)
    >>> 0.8 < kernel_length_rate("triton", "hopper", 2048, True) < 0.85
    True
    >>> kernel_length_rate("flash", "hopper", 2048, True), kernel_length_rate("flash", "ada", 2048, True) < 1.0
    (1.0, True)
    """
    tables = TRITON_FWD_BWD_TFLOPS if attention == "triton" else FLASH2_FWD_BWD_TFLOPS \
        if attention in ("flash", "flash2") else {}
    table = tables.get(arch, {})
    if not table:
        return 1.0
    return _by_length(tuple((s, r / table[True][-1][1]) for s, r in table[causal]), seq)


def causal_rate(arch: str, seq: int, attention: str = "flash") -> float:
    """Rate of a causal flash-attention kernel over its full-mask rate at `seq` tokens on `arch`
    (CAUSAL_RATE, interpolated in log2 of the length, held at the ends); 1.0 where unmeasured, and for
    the Triton kernel, whose own table by mask (kernel_length_rate) carries it.

    >>> causal_rate("hopper", 4096), causal_rate("hopper", 131072), causal_rate("ampere", 4096)
    (0.875, 0.921, 1.0)
    >>> causal_rate("hopper", 4096, "triton")
    1.0
    """
    return 1.0 if attention == "triton" else _by_length(CAUSAL_RATE.get(arch), seq)


# Sliding-window attention (models/windows.py; models/packing.py sliding_window): a flash kernel runs only
# the key tiles a query tile's window reaches. FlashAttention-2's forward loops over key blocks
# n_block_min..n_block_max, n_block_min = (m_block * kBlockM - window_left) / kBlockN
# (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h @0251105a), with 128 x 128 tiles at head
# dim 64 (flash_fwd_launch_template.h, run_mha_fwd_hdim64): query tile j runs its diagonal tile and the
# min(j, ceil(window / 128)) before it. Transformer Engine runs gpt-oss's window and attention sinks on
# cuDNN (FusedAttention: windows (left, 0) without dropout; FlashAttention is disabled for a softmax_type
# other than vanilla: transformer_engine/pytorch/attention/dot_product_attention/utils.py @v2.9), whose
# tiles are not published: FlashAttention-2's stand in. Each tile of the band costs what a tile of the causal
# kernel costs (costs/context_chunks.py windowed_work).
#
# Under context parallelism Transformer Engine runs a window only with cp_comm_type "all_gather" or "a2a"
# (attn_forward_func_with_cp asserts it: "Context parallelism does not support sliding window attention
# with cp_comm_type=...", context_parallel.py @v2.9; the p2p ring's steps, most of whose keys lie outside
# every query's window, never run). AttnFuncWithCPAndKVAllGather gathers K and V and runs one kernel per
# local chunk (two: chunks r and 2 cp - 1 - r of 2 cp), each over the keys its window reaches
# (get_kv_seq_info_after_all_gather: from the chunk's end less its length and the window), on two
# streams. The rank's work is its two chunks' query tiles' bands; the busiest rank (one without the
# sequence's first chunk, whose queries have fewer earlier keys) sets the time.
WINDOW_TILE = 128
WINDOW_CP_KERNELS = 2


def _band_tiles(first: int, count: int, reach: int) -> int:
    """Tiles query tiles first .. first + count - 1 run, each its diagonal tile and min(j, reach) before it."""
    below = max(0, min(count, reach - first))        # query tiles whose window reaches back past tile 0
    return count + below * first + below * (below - 1) // 2 + (count - below) * reach


def window_share(seq: int, window: int, cp: int = 1) -> float:
    """Share of the full seq x seq score work the flash kernels run with a sliding window of `window`
    earlier keys (WINDOW_TILE tiles), per rank times `cp` under context parallelism (the busiest rank's
    two chunks). A window reaching back over the whole sequence gives the causal kernel's tiles, above 0.5
    (its diagonal tiles).

    >>> window_share(4096, 128), window_share(256, 4096)
    (0.0615234375, 0.75)
    >>> round(window_share(8192, 4096), 4), round(window_share(8192, 4096, cp=4), 4)
    (0.3867, 0.4805)
    """
    reach = -(-window // WINDOW_TILE)
    if cp <= 1:
        n = -(-seq // WINDOW_TILE)
        return _band_tiles(0, n, reach) / n ** 2
    per_chunk = -(-seq // (2 * cp * WINDOW_TILE))      # query tiles of each of the 2 cp chunks
    busiest = max(_band_tiles(r * per_chunk, per_chunk, reach)
                  + _band_tiles((2 * cp - 1 - r) * per_chunk, per_chunk, reach) for r in range(cp))
    return busiest * cp / (2 * cp * per_chunk) ** 2


def fp8_forward_speedup(arch: str, seq: int) -> float:
    """How many times faster an FP8 flash-attention forward runs than the 16-bit one at `seq`
    tokens on `arch` (FP8_FORWARD_SPEEDUP, interpolated in log2 of the length, held at the ends).

    >>> fp8_forward_speedup("hopper", 8192), fp8_forward_speedup("hopper", 512) < fp8_forward_speedup("hopper", 8192)
    (1.618, True)
    """
    if arch not in FP8_FORWARD_SPEEDUP:
        raise ValueError(f"no published FP8 attention rate for {arch} GPUs; known on: "
                         f"{', '.join(FP8_FORWARD_SPEEDUP)}")
    return _by_length(FP8_FORWARD_SPEEDUP[arch], seq)


def fp8_attention_runs(gpu: GpuSpec) -> bool:
    """FP8 attention has a published rate on this part's chip (FP8_FORWARD_SPEEDUP; Blackwell: the parts of
    FP8_ATTENTION_PARTS, priced from cuDNN's GB200 table in costs/part_attention.py).

    >>> from scalesim.hardware import get_gpu
    >>> [fp8_attention_runs(get_gpu(g)) for g in ("h100-sxm", "gb300", "rtx5090", "l40s")]
    [True, True, False, False]
    """
    return (gpu.name in FP8_ATTENTION_PARTS[gpu.arch] if gpu.arch in FP8_ATTENTION_PARTS
            else gpu.arch in FP8_FORWARD_SPEEDUP)


def fp8_attention_gpus() -> list[str]:
    """The catalog GPUs FP8 attention runs on (fp8_attention_runs)."""
    return [name for name, gpu in gpus().items() if fp8_attention_runs(gpu)]


def fp8_speedup(arch: str, seq: int, backward: bool = False) -> float:
    """How many times faster an FP8 flash-attention pass runs than the 16-bit one at `seq` tokens on
    `arch` (Hopper; Blackwell's are costs/part_attention.py fp8_over_bf16): the forward by FP8_FORWARD_SPEEDUP,
    the backward at the 16-bit rate (no FP8 backward figure published).

    >>> fp8_speedup("hopper", 8192, backward=True), fp8_speedup("hopper", 8192)
    (1.0, 1.618)
    """
    return 1.0 if backward else fp8_forward_speedup(arch, seq)


def length_rate(arch: str, seq: int, causal: bool, backward: bool) -> float:
    """A flash kernel's rate at `seq` tokens with (`causal`) or without a mask, over the rate the
    architecture's efficiency figures stand for (AMD_REFERENCE); 1.0 where no table by length is
    published (Hopper's length effect is its causal rate, `causal_rate`).

    >>> length_rate("cdna3", 8192, True, False), length_rate("hopper", 2048, True, True)
    (1.0, 1.0)
    >>> round(length_rate("cdna3", 2048, True, True), 3)          # 279.72 / 481.895
    0.58
    """
    table = AMD_FLASH_TFLOPS.get(arch)
    if table is None:
        return 1.0
    column = 2 if backward else 1
    ref_seq, ref_mask = AMD_REFERENCE
    reference = next(row[column] for row in table[ref_mask] if row[0] == ref_seq)
    return _by_length(tuple((row[0], row[column] / reference) for row in table[causal]), seq)


def _by_length(table, seq: int) -> float:
    """A per-length table's value at `seq`: log2-interpolated, held at the ends; 1.0 without a table."""
    if not table or seq <= 0:
        return 1.0
    if seq <= table[0][0]:
        return table[0][1]
    for (s0, r0), (s1, r1) in zip(table, table[1:]):
        if seq <= s1:
            w = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return r0 + w * (r1 - r0)
    return table[-1][1]
