"""A part's own flash-attention rate within its architecture, where one benchmark measures both parts.

costs/flash.py gives one rate per architecture: on Blackwell, the efficiency and FP8 speed-ups of
NVIDIA's cuDNN SDPA benchmark on GB200 (SDPA_TFLOPS below). Blackwell Ultra (GB300) runs the same kernels
faster at the same rated tensor peaks (2.5 PFLOPS dense BF16 on both, hardware/data/gpus.yaml): it
doubles the SFU's exponential throughput (MUFU.EX2), which the softmax between a flash kernel's two
matrix products waits on (NVIDIA technical blogs "Inside NVIDIA Blackwell Ultra: The Chip Powering the
AI Factory Era" and "Making Softmax More Efficient with NVIDIA Blackwell Ultra": ~2x the MUFU.EX2 rate
of GB200; Verda's GB300 NVL72 table: 10.7 against 5 TeraExponentials/s). The tensor cores then idle
less, so the gain is largest where the matrix products are fastest (FP8, the forward).

Measured: NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/ @60e572b7, one
harness and one cuDNN (9.22, frontend 1.21.1) on both parts: gb200/llama3.1_20260424_100750.csv and
gb300/llama3.1_20260424_100757.csv, batch 2, 64 query and 8 key/value heads, head dim 128 (the Llama
70B shape), non-deterministic backward, TFLOPS at 2k, 4k, 8k, 16k and 32k tokens per sequence, causal
(top_left) and without a mask, per pass and data type (SDPA_TFLOPS). A part with a row there runs at
its rate over the reference part's (PART_REFERENCE: the part the architecture's rates stand for), by
length (log2-interpolated, held at the ends), the mask and the data type its kernel runs; both parts'
efficiencies apply to their own dense BF16 peaks, so the ratio is taken over the peaks' ratio (1 here).
Parts without a row (B200, B300, which Blackwell Ultra shares but no same-harness table measures) run
at the architecture's rate. Only cuDNN's kernel ("flash" on Blackwell) is measured.

FP8 attention on an architecture with a reference part in the table runs the reference part's own FP8
over BF16 ratio with the op's mask (a causal op: the top_left rows, GB200 8k forward 2047 / 1574,
backward 1454 / 1332; the full-mask rows' 2241 / 1771 and 1772 / 1404 for an op without a mask);
elsewhere (Hopper) costs/flash.py fp8_speedup. Under context parallelism each ring step (an equal
share of the work, costs/context_chunks.py ring_steps) gains what its own length and mask gain, as
ring_time_factor takes each step's rate: cp 8 at 8k runs 1024- and 724-token steps.
"""

from __future__ import annotations

from scalesim.hardware import GpuSpec
from scalesim.costs.context_chunks import ring_steps
from scalesim.costs.flash import _by_length, fp8_speedup

SDPA_LENGTHS = (2048, 4096, 8192, 16384, 32768)
# (data type, causal, backward) -> TFLOPS at SDPA_LENGTHS (module docstring; FP8: cuDNN's FP8 kernels,
# Transformer Engine's FP8 dot-product attention with its FP8 backward).
SDPA_TFLOPS = {
    "gb200": {("bf16", True, False): (1097, 1408, 1574, 1708, 1622),
              ("bf16", True, True): (885, 1148, 1332, 1328, 1226),
              ("bf16", False, False): (1433, 1599, 1771, 1697, 1634),
              ("bf16", False, True): (1124, 1350, 1404, 1374, 1262),
              ("fp8", True, False): (1420, 1805, 2047, 2154, 2197),
              ("fp8", True, True): (831, 1178, 1454, 1632, 1687),
              ("fp8", False, False): (1881, 2093, 2241, 2263, 2223),
              ("fp8", False, True): (1214, 1577, 1772, 1836, 1825)},
    "gb300": {("bf16", True, False): (1373, 1703, 1856, 1915, 1953),
              ("bf16", True, True): (967, 1248, 1435, 1507, 1490),
              ("bf16", False, False): (1805, 1900, 2017, 2014, 1836),
              ("bf16", False, True): (1213, 1429, 1531, 1536, 1427),
              ("fp8", True, False): (1954, 2532, 2897, 3054, 3108),
              ("fp8", True, True): (944, 1396, 1781, 2035, 2128),
              ("fp8", False, False): (2728, 2988, 3160, 3182, 3050),
              ("fp8", False, True): (1390, 1839, 2111, 2177, 2178)},
}
# The part each architecture's flash rates stand for, with its dense BF16 peak in FLOP/s (gpus.yaml gb200).
PART_REFERENCE = {"blackwell": ("gb200", 2500e12)}


def part_speedup(gpu: GpuSpec, seq: int, causal: bool, fp8: bool, backward: bool,
                 attention: str = "flash") -> float:
    """How many times faster this part runs a flash-attention pass than its architecture's rate gives
    it (SDPA_TFLOPS over the reference part's, per its peak); 1.0 for a part without a published row.

    >>> from scalesim.hardware import get_gpu
    >>> round(part_speedup(get_gpu("gb300"), 8192, True, False, False), 3)     # 1856 / 1574
    1.179
    >>> part_speedup(get_gpu("b300"), 8192, True, False, False), part_speedup(get_gpu("gb200"), 8192, True, True, True)
    (1.0, 1.0)
    """
    reference = PART_REFERENCE.get(gpu.arch)
    if attention != "flash" or reference is None or gpu.name not in SDPA_TFLOPS or gpu.name == reference[0]:
        return 1.0
    key = ("fp8" if fp8 else "bf16", causal, backward)
    ratios = tuple((s, p / r) for s, p, r in zip(SDPA_LENGTHS, SDPA_TFLOPS[gpu.name][key],
                                                  SDPA_TFLOPS[reference[0]][key]))
    return _by_length(ratios, seq) * reference[1] / gpu.bf16_flop_per_s


def fp8_over_bf16(arch: str, seq: int, causal: bool, backward: bool) -> float:
    """FP8 attention's speed-up over the 16-bit kernel at `seq` tokens: the reference part's own, with the
    op's mask, where the table has it (module docstring); else costs/flash.py fp8_speedup.

    >>> round(fp8_over_bf16("blackwell", 8192, True, True), 3), fp8_over_bf16("blackwell", 8192, False, True)
    (1.092, 1.262)
    """
    reference = PART_REFERENCE.get(arch)
    if reference is None:
        return fp8_speedup(arch, seq, backward)
    rows = SDPA_TFLOPS[reference[0]]
    return round(_by_length(tuple((s, f / b) for s, f, b in zip(SDPA_LENGTHS, rows[("fp8", causal, backward)],
                                                              rows[("bf16", causal, backward)])), seq), 3)


def attention_speedup(gpu: GpuSpec, seq: int, causal: bool, fp8: bool, backward: bool,
                      attention: str = "flash", cp: int = 1) -> float:
    """A flash pass's rate over the architecture's 16-bit rate: FP8 attention's measured speed-up
    (fp8_over_bf16) times the part's own (part_speedup), each ring step of `cp` at its own length and mask.

    >>> from scalesim.hardware import get_gpu
    >>> attention_speedup(get_gpu("gb200"), 8192, False, True, True)
    1.262
    >>> gb200 = get_gpu("gb200")
    >>> attention_speedup(gb200, 8192, True, True, True, cp=8) < attention_speedup(gb200, 8192, True, True, True)
    True
    """
    steps = ring_steps(seq, causal, cp) if seq > 0 else ((seq, causal),)
    return len(steps) / sum(1 / ((fp8_over_bf16(gpu.arch, tokens, mask, backward) if fp8 else 1.0)
                                 * part_speedup(gpu, tokens, mask, fp8, backward, attention)) for tokens, mask in steps)
