"""How long one serving iteration takes on one GPU, and what its memory leaves for the KV cache.

An iteration (continuous batching, Yu et al. 2022, Orca) runs every sequence in
the batch through the model once: prefill chunks of several prompt tokens and
decode steps of one token each, all in the same GEMMs (chunked prefill,
Agrawal et al. 2024, Sarathi-Serve). Each GEMM is a roofline of its FLOP
against the bytes it moves (weights, once per iteration, plus activations),
as in `scalesim.costs.compute`; decode is memory-bound because every step
reads all the weights and each sequence's keys and values.

Quantised weights are read at their stored width. Weight-only formats (int4
AWQ/GPTQ-style, fp8 on GPUs without FP8 tensor cores, as vLLM's Marlin
kernels run them) dequantise each weight tile to 16-bit inside the GEMM and
multiply at the 16-bit rate; fp8 and int8 on GPUs that have those tensor
cores multiply at that rate (W8A8), after casting the activations.

The model is a ModelSpec built for ONE token (seq_len 1), so each GEMM's
`gemm_mnk` is (1, n, k) and the iteration's token count is its m.
SI units throughout; bytes per element named `*_bytes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalesim.costs.compute import (KERNEL_OVERHEAD_S, achieved_peak_flop_per_s, flash_efficiency,
                                    relative_shape_efficiency, streaming_bw_bytes_per_s)
from scalesim.costs.gemm_depth import depth_efficiency
from scalesim.costs.memory import FRAMEWORK_OVERHEAD_BYTES
from scalesim.hardware import GpuSpec
from scalesim.models.spec import ModelSpec

# Bytes per stored weight. int4 as AWQ/GPTQ store it: 4-bit values with one fp16 scale and
# one zero point per group of 128 (Lin et al. 2024, AWQ, sec. 5.1; Frantar et al. 2023,
# GPTQ, group size 128): 0.5 + 2 x 2 / 128 bytes.
INT4_GROUP = 128
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2 * 2 / INT4_GROUP}
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
ACTIVATION_BYTES = 2.0            # activations between kernels stay 16-bit in every format

# Embedding and output head stay 16-bit in quantised checkpoints (vLLM's AWQ, GPTQ and FP8
# configs quantise the blocks' linear layers only; lm_head is left unquantised by default).
UNQUANTISED_LAYER_KINDS = ("embedding", "head", "norm")

# Paged KV cache block: vLLM's default block_size of 16 tokens (vLLM engine arguments,
# --block-size; Kwon et al. 2023, PagedAttention, sec. 4.1).
BLOCK_TOKENS = 16
# Share of GPU memory vLLM lets itself use: weights, activations and the KV cache all come
# out of it (vLLM engine arguments, --gpu-memory-utilization, default 0.9).
GPU_MEMORY_UTILIZATION = 0.9

# Weight-only dequantisation inside the GEMM: integer/float ops per weight element each
# time a tile of weights is dequantised (unpack, convert, subtract the zero point, scale),
# executed on the non-tensor pipes at half the FP32 FMA FLOP rate, overlapped with the
# tensor cores and the weight loads. Each tile is dequantised once per slice of
# MARLIN_TILE_M tokens. ESTIMATED from Frantar et al. 2024, MARLIN, sec. 4 (per-element
# lop3/fma sequences; 64-row tiles), not measured here.
DEQUANT_OPS_PER_ELEMENT = 4.0
MARLIN_TILE_M = 64
# Tensor-core MMA tile rows (PTX mma.sync m16n8k16) and the batch below which GEMMs run as
# skinny split-K kernels over such tiles (Marlin handles batches up to 64 this way; Frantar et
# al. 2024, sec. 4; cuBLAS/CUTLASS pick split-K "GEMV-like" kernels for small m).
MMA_M = 16
SKINNY_M = 64
# Flash attention reads each sequence's keys and values once per block of this many query
# tokens (FlashAttention-2's 128-row query tiles, Dao 2023, Algorithm 1).
FLASH_QUERY_TILE = 128
# Kernels per transformer block in a vLLM-style forward: fused add+RMSNorm x2, QKV GEMM, RoPE,
# attention, output GEMM, merged gate/up GEMM, SiLU-and-mul, down GEMM (vLLM llama.py).
KERNELS_PER_BLOCK = 9


@dataclass(frozen=True, slots=True)
class ServingShard:
    """What one GPU of a serving replica holds and runs: a tp x pp slice of the model."""

    model: ModelSpec               # built for one token
    tp: int = 1
    pp: int = 1
    weights: str = "bf16"
    kv_cache: str = "bf16"

    @property
    def head_dim(self) -> int:
        """The config's head_dim where it has one (Qwen3, Gemma 2, gpt-oss), else hidden / heads."""
        return self.model.head_dim or self.model.hidden // self.model.heads

    @property
    def layers_per_stage(self) -> int:
        return math.ceil(self.model.num_layers / self.pp)

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads one GPU holds: split over tp, replicated when tp exceeds them (vLLM)."""
        return max(1, (self.model.kv_heads or self.model.heads) // self.tp)

    @property
    def heads_per_gpu(self) -> int:
        return max(1, self.model.heads // self.tp)


def _blocks(model: ModelSpec):
    return [layer for layer in model.layers if layer.kind == "transformer_block"]


def block_gemms(shard: ServingShard) -> list[tuple[int, int]]:
    """(n, k) of one block's GEMMs on one GPU, Megatron-split over tp; gate and up merged
    into one GEMM as vLLM's MergedColumnParallelLinear runs them."""
    block = _blocks(shard.model)[0]
    shapes = {op.name: op.gemm_mnk[1:] for op in block.ops if op.gemm_mnk is not None}
    tp = shard.tp
    out = [(shapes["qkv"][0] // tp, shapes["qkv"][1]), (shapes["attn_out"][0], shapes["attn_out"][1] // tp)]
    up_n = shapes["mlp_up"][0] + (shapes["mlp_gate"][0] if "mlp_gate" in shapes else 0)
    out += [(up_n // tp, shapes["mlp_up"][1]), (shapes["mlp_down"][0], shapes["mlp_down"][1] // tp)]
    return out


def weight_bytes_per_gpu(shard: ServingShard) -> float:
    """Weights on the most loaded GPU: its stage's blocks at the weight format, plus the
    embedding (first stage) or output head and final norm (last stage) in 16-bit, split over tp.

    >>> from scalesim.models import get_model
    >>> m = get_model("llama3-8b", seq_len=1)
    >>> round(weight_bytes_per_gpu(ServingShard(m)) / m.params, 3)   # bf16: 2 bytes a parameter
    2.0
    """
    blocks = _blocks(shard.model)
    gemm_params = sum(n * k for n, k in block_gemms(shard))
    block_bytes = gemm_params * WEIGHT_BYTES[shard.weights] + (blocks[0].params / shard.tp - gemm_params) * 2.0
    edges = {kind: sum(layer.params for layer in shard.model.layers if layer.kind == kind) * 2.0 / shard.tp
             for kind in UNQUANTISED_LAYER_KINDS}
    stage = shard.layers_per_stage * block_bytes
    if shard.pp == 1:
        return stage + sum(edges.values())
    return stage + max(edges["embedding"], edges["head"] + edges["norm"])


def kv_bytes_per_token(shard: ServingShard) -> float:
    """Keys and values one token leaves in one GPU's cache: 2 x layers x kv heads x head dim x bytes."""
    return 2.0 * shard.layers_per_stage * shard.kv_heads_per_gpu * shard.head_dim * KV_BYTES[shard.kv_cache]


def activation_workspace_bytes(shard: ServingShard, max_batch_tokens: int, max_seqs: int) -> float:
    """Peak transient memory of the largest iteration, as vLLM's profiling run measures it: what one
    block keeps alive at once for max_batch_tokens tokens in 16-bit, plus fp32 logits for max_seqs rows.

    A block's intermediates do not all live at once: each is freed after its last use (PyTorch's
    caching allocator reuses a tensor's block once its last reference is gone; TensorRT's builder
    shares activation memory between tensors whose lifetimes do not overlap), so the peak is the
    largest step's, not the sum of every output. Alive throughout: the residual stream and the
    sublayer output it is added to (vLLM's fused add+RMSNorm keeps both, llama.py). Per step, beside
    them: QKV GEMM (its output), attention (QKV and its output), output GEMM (attention output and
    the projection), gate/up GEMM (its output), SiLU-and-mul (gate/up and the product), down GEMM (the
    product and the projection). An estimate from the tensor shapes, not a measurement.

    >>> from scalesim.models import get_model
    >>> shard = ServingShard(get_model("llama2-7b", seq_len=1))
    >>> activation_workspace_bytes(shard, 1, 0)      # 2 x 4096 + 1.5 x 22016 (SiLU-and-mul step), 2 bytes
    82432.0
    """
    (qkv, _), (out_n, out_k), (up, _), _ = block_gemms(shard)
    steps = (qkv, qkv + out_k, out_k + out_n, up, up + up // 2, up // 2 + out_n)
    per_token = (2 * shard.model.hidden + max(steps)) * ACTIVATION_BYTES
    logits = max_seqs * (shard.model.vocab or 0) / shard.tp * 4.0
    return max_batch_tokens * per_token + logits


def kv_cache_bytes(shard: ServingShard, capacity_bytes: float, max_batch_tokens: int, max_seqs: int,
                   utilization: float = GPU_MEMORY_UTILIZATION, free_fraction: float | None = None) -> float:
    """Memory left to the KV cache: the usable share of capacity less weights, activation
    workspace and the framework's own (CUDA context, NCCL and cuBLAS buffers), as vLLM sizes it;
    or, given `free_fraction`, that share of what the rest leaves (TensorRT-LLM). May be negative."""
    rest = (weight_bytes_per_gpu(shard) + activation_workspace_bytes(shard, max_batch_tokens, max_seqs)
            + FRAMEWORK_OVERHEAD_BYTES)
    if free_fraction is not None:
        return (capacity_bytes - rest) * free_fraction
    return capacity_bytes * utilization - rest


def kv_cache_blocks(free_bytes: float, shard: ServingShard) -> int:
    """Whole paged-cache blocks that fit in `free_bytes` (0 when nothing fits).

    >>> from scalesim.models import get_model
    >>> shard = ServingShard(get_model("llama3-8b", seq_len=1))
    >>> kv_bytes_per_token(shard)            # 2 x 32 layers x 8 heads x 128 x 2 bytes
    131072.0
    >>> kv_cache_blocks(131072.0 * 16 * 10 + 5, shard)
    10
    """
    return max(0, int(free_bytes // (kv_bytes_per_token(shard) * BLOCK_TOKENS)))


@dataclass(frozen=True, slots=True)
class IterationWork:
    """What one iteration asks of the model, summed over its sequences.

    tokens: new tokens (prefill chunk tokens plus one per decoding sequence).
    sampled: sequences whose last token reaches the output head this iteration.
    prefill_pairs / decode_pairs: query-key pairs attention computes (causal).
    prefill_kv_tokens / decode_kv_tokens: cached tokens whose keys and values are read
      (prefill: once per FLASH_QUERY_TILE query rows).
    """

    tokens: int
    sampled: int
    prefill_pairs: float = 0.0
    decode_pairs: float = 0.0
    prefill_kv_tokens: float = 0.0
    decode_kv_tokens: float = 0.0


def iteration_work(entries) -> IterationWork:
    """IterationWork of (new_tokens, context_after, samples) per sequence; decode has new_tokens 1.

    >>> iteration_work([(1, 100, True), (4, 4, False)])
    IterationWork(tokens=5, sampled=1, prefill_pairs=10.0, decode_pairs=100.0, prefill_kv_tokens=4.0, decode_kv_tokens=100.0)
    """
    tokens = sampled = decode = 0
    pp = pk = 0.0
    for q, c, samples in entries:      # hot: once per sequence per simulated iteration
        tokens += q
        if samples:
            sampled += 1
        if q == 1:
            decode += c
        else:
            pp += q * (c - q) + q * (q + 1) / 2
            pk += c * math.ceil(q / FLASH_QUERY_TILE)
    # A decode step's query meets all its context: as many pairs as cached tokens read (a sum of
    # integers, exact as a float)
    return IterationWork(tokens, sampled, pp, float(decode), pk, float(decode))


def _gemm_s(m: int, n: int, k: int, gpu: GpuSpec, weights: str, weight_bytes: float) -> float:
    """One GEMM of m tokens through an n x k weight stored at `weight_bytes` per element."""
    if m <= 0:
        return 0.0
    w8a8 = (weights == "fp8" and gpu.fp8_flop_per_s) or (weights == "int8" and gpu.int8_op_per_s)
    if weights == "int8" and w8a8:
        peak = gpu.int8_op_per_s * gpu.gemm_efficiency * gpu.training_clock_fraction
    else:
        peak = achieved_peak_flop_per_s(gpu, "fp8" if w8a8 else "bf16")
    if m < SKINNY_M:
        # Skinny GEMMs (decode batches) run split-K kernels on 16-row MMA tiles: the padded rows
        # are wasted, not a whole 128- or 256-row tile; no wave quantisation over the k splits.
        compute = 2.0 * MMA_M * math.ceil(m / MMA_M) * n * k / peak
    else:
        depth = depth_efficiency(k, gpu.gemm_k_overhead, weights if w8a8 else "bf16")   # costs/gemm_depth.py
        compute = 2.0 * m * n * k / (peak * relative_shape_efficiency(m, n, gpu) * depth)
    moved = m * k * ACTIVATION_BYTES + n * k * weight_bytes + m * n * ACTIVATION_BYTES
    memory = moved / (gpu.memory_bw_bytes_per_s * gpu.memory_bw_efficiency)
    extra = 0.0
    if w8a8:
        extra = 3.0 * m * k / streaming_bw_bytes_per_s(gpu) + KERNEL_OVERHEAD_S   # per-token activation cast
    elif weight_bytes < 2.0:
        # Dequantisation runs on the CUDA cores beside the tensor-core MMAs and the
        # asynchronous weight loads (Marlin's pipeline), so it is one more roof, not a sum.
        passes = math.ceil(m / MARLIN_TILE_M)
        compute = max(compute, n * k * passes * DEQUANT_OPS_PER_ELEMENT / (gpu.fp32_flop_per_s / 2.0))
    return max(compute, memory) + extra + KERNEL_OVERHEAD_S


def _attention_s(work: IterationWork, shard: ServingShard, gpu: GpuSpec) -> float:
    """Attention of one layer: prefill chunks (compute-bound, flash) and decode steps (KV reads).
    Its cached keys and values are only read (a decode step writes one output row per query head),
    so they stream at the GPU's read-only rate (`GpuSpec.read_bw_bytes_per_s`: BabelStream's Dot
    where measured), not at a copy's."""
    d, heads = shard.head_dim, shard.heads_per_gpu
    peak = gpu.bf16_flop_per_s * gpu.training_clock_fraction * flash_efficiency(gpu, "flash")
    bw = gpu.read_bw_bytes_per_s
    kv_token = 2.0 * shard.kv_heads_per_gpu * d * KV_BYTES[shard.kv_cache]
    total = 0.0
    if work.prefill_pairs:
        total += max(4.0 * d * heads * work.prefill_pairs / peak, work.prefill_kv_tokens * kv_token / bw)
    if work.decode_pairs:
        total += max(4.0 * d * heads * work.decode_pairs / peak, work.decode_kv_tokens * kv_token / bw)
    return total + KERNEL_OVERHEAD_S


def block_dense_s(tokens: int, shard: ServingShard, gpu: GpuSpec) -> float:
    """One transformer block on one GPU without its attention core: four GEMMs and the fused
    element-wise kernels (add+RMSNorm x2, RoPE, SiLU-and-mul)."""
    wb = WEIGHT_BYTES[shard.weights]
    shapes = block_gemms(shard)
    gemms = sum(_gemm_s(tokens, n, k, gpu, shard.weights, wb) for n, k in shapes)
    h = shard.model.hidden
    elementwise_bytes = tokens * ACTIVATION_BYTES * (2 * 4 * h + 2 * shapes[0][0] + 1.5 * shapes[2][0])
    return gemms + elementwise_bytes / streaming_bw_bytes_per_s(gpu) + (KERNELS_PER_BLOCK - 5) * KERNEL_OVERHEAD_S


def head_time_s(sampled: int, shard: ServingShard, gpu: GpuSpec) -> float:
    """Output head (16-bit, vocabulary split over tp) for the sampled rows, and sampling over its logits."""
    vocab = (shard.model.vocab or 0) // shard.tp
    if not vocab or not sampled:
        return 0.0
    gemm = _gemm_s(sampled, vocab, shard.model.hidden, gpu, "bf16", 2.0)
    sampling = sampled * vocab * 4.0 * 2 / streaming_bw_bytes_per_s(gpu) + KERNEL_OVERHEAD_S
    return gemm + sampling


def dense_iteration_s(tokens: int, sampled: int, shard: ServingShard, gpu: GpuSpec) -> float:
    """GPU time of an iteration's token-count-dependent work through every stage in turn:
    embedding, all blocks without attention, output head. Collectives excluded."""
    embed = tokens * shard.model.hidden * ACTIVATION_BYTES * 2 / streaming_bw_bytes_per_s(gpu)
    blocks = shard.model.num_layers * block_dense_s(tokens, shard, gpu)
    return embed + KERNEL_OVERHEAD_S + blocks + head_time_s(sampled, shard, gpu)


def attention_iteration_s(work: IterationWork, shard: ServingShard, gpu: GpuSpec,
                          windowed: IterationWork | None = None, windowed_layers: int = 0) -> float:
    """Attention cores of every layer for the iteration's sequences; `windowed_layers` of them, with a
    sliding window, do `windowed` (windowed_iteration_work) instead."""
    full = shard.model.num_layers - (windowed_layers if windowed is not None else 0)
    return full * _attention_s(work, shard, gpu) + (
        windowed_layers * _attention_s(windowed, shard, gpu) if windowed is not None and windowed_layers else 0.0)


def kv_window(model: ModelSpec) -> tuple[int, int]:
    """(window, layers with it) of a model's sliding-window attention (models/windows.py); (0, 0) without.

    >>> from scalesim.models import get_model
    >>> kv_window(get_model("gemma2-9b", seq_len=1)), kv_window(get_model("llama3-8b", seq_len=1))
    ((4096, 21), (0, 0))
    """
    windows = [op.window for layer in _blocks(model) for op in layer.ops if op.kind == "attention" and op.window]
    return (max(windows), len(windows)) if windows else (0, 0)


def windowed_iteration_work(entries, window: int) -> IterationWork:
    """IterationWork (iteration_work) of a layer whose queries each meet at most `window` keys, themselves
    included (Hugging Face's and vLLM's sliding_window): a decode step reads min(context, window) cached
    tokens; a prefill query at position p meets min(p + 1, window) keys, and its query tile's keys span
    at most window + FLASH_QUERY_TILE tokens.

    >>> short = [(1, 100, True), (4, 4, False)]
    >>> windowed_iteration_work(short, 4096) == iteration_work(short)
    True
    >>> w = windowed_iteration_work([(1, 10000, True), (256, 8192, False)], 4096)
    >>> w.decode_kv_tokens, w.prefill_pairs, w.prefill_kv_tokens        # 256 queries x 4096 keys
    (4096.0, 1048576.0, 8448.0)
    """
    tokens = sampled = 0
    decode = pp = pk = 0.0
    for q, c, samples in entries:
        tokens += q
        sampled += bool(samples)
        if q == 1:
            decode += min(c, window)
            continue
        lo, hi = c - q + 1, c            # keys each query meets without the window: lo .. hi
        capped = max(0, min(hi, window) - lo + 1)
        pp += (lo + lo + capped - 1) * capped / 2 + (q - capped) * window
        pk += min(c, window + FLASH_QUERY_TILE) * math.ceil(q / FLASH_QUERY_TILE)
    return IterationWork(tokens, sampled, pp, decode, pk, decode)


def iteration_compute_s(work: IterationWork, shard: ServingShard, gpu: GpuSpec) -> float:
    """GPU time of one iteration through all stages, collectives and host excluded.

    >>> from scalesim.models import get_model
    >>> from scalesim.hardware import get_gpu
    >>> shard, h100 = ServingShard(get_model("llama3-8b", seq_len=1)), get_gpu("h100-sxm")
    >>> one = iteration_compute_s(iteration_work([(1, 512, True)]), shard, h100)
    >>> 16e9 / 3.35e12 < one < 2 * 16e9 / 3.35e12      # about the time to read 16 GB of weights
    True
    """
    return dense_iteration_s(work.tokens, work.sampled, shard, gpu) + attention_iteration_s(work, shard, gpu)
