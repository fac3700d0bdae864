"""Host work of data-parallel collectives that move parameters as per-rank slices: nanotron's ZeRO-1,
and Megatron-Core's distributed-optimizer buckets (`shard_views_host_s`).

nanotron's ZeRO-1 splits every parameter tensor into one slice per data-parallel rank
(optim/zero.py `_partition_parameters`). Its two data-parallel collectives work on lists of those slices (src/nanotron/distributed.py, @67c5ebb6,
the commit its benchmark sweep ran, torch 2.1 / cu121 per its run_multinode.sh):

- gradients, only when DDP wraps the model with the fp32 hook (`parallel.zero1_over_ddp` with fp32-add;
  without fp32-add DDP all-reduces its buckets itself; without DDP, nanotron's fp32-accumulation runs
  reduce the whole fp32 buffer with one all-reduce after the backward, trainer.py:797-799 and 524-534,
  parallel/nanotron_dp.py): the fp32 accumulation hook
  (optim/gradient_accumulator.py `get_fp32_accum_hook`) runs once per DDP bucket on the backward's thread and calls `reduce_scatter_coalesced`, which flattens
  the bucket's slices once per rank (`_flatten_dense_tensors`, a Python call each) and hands the
  `dp` flat tensors to `dist.reduce_scatter`; torch's ProcessGroupNCCL copies each listed input into
  one flat buffer on NCCL's stream before the call (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
  reduce_scatter, "Copy the input tensors to the flattened inputs": `dp` C++-issued copies).
- parameters: after the update, `_all_gather_params` calls `all_gather_coalesced`: `dp` flattens of
  the output slices, one all-gather into `dp` listed outputs (ProcessGroupNCCL copies the flat result
  into each: `dp` C++ copies), then `update_output` copies every gathered slice back into its
  parameter from a Python loop: `dp` x (parameter tensors) `copy_` calls.

Every one of these ops runs with autograd off (the hook inside the backward, the all-gather inside the
optimizer's `@torch.no_grad` step) and picks no backend algorithm: a Python-issued one costs
SLICE_OP_FRACTION of the host's dispatch time (costs/host.py, DISPATCH_S_PER_OP, measured for a GEMM
called from Python), a C++-issued copy BACKWARD_DISPATCH_FRACTION of that (an estimate). Building
nanotron's slices (one `torch.split` call per tensor, `_unflatten_dense_tensors`' views) launches
nothing and is left out.

Megatron-Core's distributed optimizer cuts each bucket into per-rank views from Python every time it
reduces or gathers the bucket: `shard_buffer(buffer, dp)` is a list comprehension of `dp` slicing
calls, `buffer[r * shard : (r + 1) * shard]`, of which the call keeps one
(megatron/core/distributed/param_and_grad_buffer.py @core_v0.13.1: start_param_sync before each
bucket's all-gather, start_grad_sync before each bucket's reduce-scatter). Pure functions.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.costs.host import BACKWARD_DISPATCH_FRACTION
from scalesim.models.moe import MOE_EXPERTS
from scalesim.models.spec import LayerSpec

# A tensor copy or concatenation issued from Python with autograd off goes through Python, the
# pybind11 boundary, the ATen dispatcher and the driver's launch, ~1, ~1, ~1-2 and ~1-3 us
# (jiahuanglin.xyz "From PyTorch op to kernel launch", its table of the dispatch chain's layers;
# mid-range 5.5 us), skipping the autograd record (~1-3 us) and the backend's algorithm choice (~1-5
# us) a GEMM called from Python pays: 5.5 of DISPATCH_S_PER_OP's 13 us. ESTIMATE. Checked against
# the nanotron sweep's ZeRO-1 runs that are not validation cases (bench_final2 CSV, copy in
# eyao600/Rapid-LLM validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6: the 20
# ZeRO-1 runs on 16-32 servers with one micro-batch per step and tensor parallelism within a server,
# on jobs whose logged network test was healthy, validation cases left out;
# validation/nanotron_sweep_check.py). On 2026-12-05, after nanoz1 (these runs built as nanotron ran
# them, fp32 accumulation without DDP): median |error| 8.7% (signed +3.6%) at the full 13 us, 21.1%
# (+21.1%, all 20 too fast) at this; data parallel 128 -12..+5% at 13 us, +15..+36% at this; 256
# -24/-19% and +27/+27%. The value was chosen when they were modelled as DDP-hook runs (11.3%, -7.3%
# at 13 us; 8.1%, +4.2% at this). Without DDP these runs issue no reduce-scatter: only the all-gather's
# flattens and copies carry this fraction there.
SLICE_OP_FRACTION = 5.5 / 13.0

# A tensor view made from Python (a slice, `tensor[a:b]`) goes through Python, the pybind11 boundary and
# the ATen dispatcher, ~1, ~1 and ~1-2 us, and launches nothing: SLICE_OP_FRACTION's chain without the
# driver's launch (~1-3 us, mid-range 2), 3.5 of DISPATCH_S_PER_OP's 13 us (jiahuanglin.xyz, the table
# cited above). ESTIMATE.
VIEW_OP_FRACTION = 3.5 / 13.0

# Parameter tensors of nanotron's Llama layers (src/nanotron/models/llama.py @67c5ebb6): a decoder
# layer holds input_layernorm, attn.qkv_proj, attn.o_proj, post_attention_layernorm,
# mlp.gate_up_proj and mlp.down_proj weights (merged QKV and gate/up, no biases); the embedding,
# the final norm and an untied lm_head one each.
NANOTRON_TENSORS = {"transformer_block": 6, "embedding": 1, "norm": 1, "head": 1}


MERGED_GEMMS = ("mlp_gate", "mlp_up")     # nanotron's one gate_up_proj tensor


def param_tensors(layer: LayerSpec) -> int:
    """Parameter tensors a layer holds as nanotron builds it (a tied head holds none).

    >>> param_tensors(LayerSpec("b", "transformer_block", 10, (), 0.0)), param_tensors(LayerSpec("h", "head", 0, (), 0.0))
    (6, 0)
    """
    return len(param_tensor_shares(layer))


def param_tensor_shares(layer: LayerSpec) -> tuple[float, ...]:
    """Each parameter tensor's share of the layer's parameters, in forward order: a GEMM's weight is
    n x k of its (m, n, k), nanotron's gate and up projections one tensor, the norms share what is
    left (a layer without norms holds it as one last tensor, its biases: every parameter counts);
    kinds without such ops split their parameters evenly over NANOTRON_TENSORS (or one).

    >>> from scalesim.models.spec import OpSpec
    >>> ops = (OpSpec("norm_attn", "norm", 0, 0), OpSpec("qkv", "gemm", 0, 0, (1, 6, 2)),
    ...        OpSpec("mlp_gate", "gemm", 0, 0, (1, 4, 2)), OpSpec("mlp_up", "gemm", 0, 0, (1, 4, 2)))
    >>> [round(share * 30, 6) for share in param_tensor_shares(LayerSpec("b", "transformer_block", 30, ops, 0.0))]
    [2.0, 12.0, 16.0]
    """
    return tuple(share for share, _ in _param_tensors(layer))


def param_tensor_weights(layer: LayerSpec) -> tuple[bool, ...]:
    """For each tensor of `param_tensor_shares`, whether it is a GEMM's weight (not a norm's weights and
    the biases, which share what is left); True for all where the layer has no such ops to tell.

    >>> from scalesim.models.spec import OpSpec
    >>> ops = (OpSpec("norm_attn", "norm", 0, 0), OpSpec("qkv", "gemm", 0, 0, (1, 6, 2)))
    >>> param_tensor_weights(LayerSpec("b", "transformer_block", 14, ops, 0.0))
    (False, True)
    """
    return tuple(weight for _, weight in _param_tensors(layer))


def _param_tensors(layer: LayerSpec) -> tuple[tuple[float, bool], ...]:
    """(share, a GEMM's weight) of each parameter tensor, in forward order (`param_tensor_shares`)."""
    if layer.params <= 0:
        return ()
    sizes: list[float] = []
    norms: list[int] = []
    previous = ""
    for op in layer.ops:
        if op.kind == "gemm" and op.gemm_mnk is not None:
            weight = float(op.gemm_mnk[1] * op.gemm_mnk[2] * op.groups)
            if op.name == MERGED_GEMMS[1] and sizes and previous == MERGED_GEMMS[0]:
                sizes[-1] += weight
            else:
                sizes.append(weight)
            previous = op.name
        elif op.kind == "norm":
            norms.append(len(sizes))
            sizes.append(0.0)
            previous = op.name
    left = max(layer.params - sum(sizes), 0.0)
    if not sizes or (not norms and left > 0.01 * layer.params):
        count = NANOTRON_TENSORS.get(layer.kind, 1)
        return ((1.0 / count, True),) * count
    if not norms and left > 0:          # no norm to hold them: the biases, a tensor of their own, last
        norms.append(len(sizes))
        sizes.append(0.0)
    for index in norms:
        sizes[index] = left / len(norms)
    return tuple((size / layer.params, index not in norms) for index, size in enumerate(sizes))


# Megatron-Core's routed experts as Transformer Engine holds them: TEGroupedMLP builds linear_fc1 (gate and up in
# one, 2 x moe_ffn_hidden outputs under a gated linear unit) and linear_fc2 as GroupedLinear modules over the
# rank's num_local_experts (NVIDIA/Megatron-LM megatron/core/transformer/moe/experts.py @0d8e0714, :788-826, the
# Megatron-LM of Megatron Bridge v0.2.0), and GroupedLinear registers one Parameter per GEMM, weight{i}, plus
# bias{i} when it has biases (NVIDIA/TransformerEngine transformer_engine/pytorch/module/grouped_linear.py
# @v2.9 (70f53666), :646-676). SequentialMLP (an MLP per local expert, linear_fc1 and linear_fc2 each) holds
# the same tensors.
EXPERT_FC1 = ("expert_gate", "expert_up")
EXPERT_FC2 = ("expert_down",)


def expert_tensors(layer: LayerSpec) -> tuple[tuple[float, bool], ...]:
    """(parameters, a GEMM's weight) of each routed-expert parameter tensor of the rank's `layer` (its
    `expert_params`, already cut by expert parallelism): per local expert (its grouped GEMMs' `groups`), fc1's
    and fc2's weights, and their biases when the experts have them (the `expert_bias` op); sized by the GEMMs'
    n x k and the biases' n, scaled to sum to `expert_params`. Empty for a layer without routed experts.

    >>> from scalesim.models.spec import OpSpec
    >>> ops = tuple(OpSpec(n, "gemm", 0, 0, (1, 4, 2), groups=3) for n in ("expert_gate", "expert_up", "expert_down"))
    >>> len(expert_tensors(LayerSpec("b", "transformer_block", 48, ops, 0.0, expert_params=48)))
    6
    """
    gemms = [op for op in layer.ops if op.name in MOE_EXPERTS and op.gemm_mnk is not None]
    if layer.expert_params <= 0 or not gemms:
        return ()
    groups = max(op.groups for op in gemms)
    biased = any(op.name == MOE_EXPERTS[-1] for op in layer.ops)
    tensors: list[tuple[float, bool]] = []
    for names in (EXPERT_FC1, EXPERT_FC2):          # each module's weight0, bias0, weight1, ...
        linear = [op.gemm_mnk for op in gemms if op.name in names]
        expert = [(float(sum(n * k for _, n, k in linear)), True)]
        expert += [(float(sum(n for _, n, _ in linear)), False)] if biased else []
        tensors += expert * groups
    scale = layer.expert_params / sum(size for size, _ in tensors)
    return tuple((size * scale, weight) for size, weight in tensors)


def dense_part(layer: LayerSpec) -> LayerSpec:
    """The layer without its routed experts (their ops and parameters): what its data-parallel buffer holds
    when the experts' parameters go to a buffer of their own (Megatron-Core)."""
    if layer.expert_params <= 0:
        return layer
    return replace(layer, ops=tuple(op for op in layer.ops if op.name not in MOE_EXPERTS),
                   params=layer.params - layer.expert_params, expert_params=0)


def reduce_scatter_hook_host_s(dp: int, dispatch_s: float) -> float:
    """CPU time the fp32 accumulation hook spends on one bucket before its reduce-scatter is issued:
    `dp` Python flattens, then `dp` C++ copies into NCCL's flat input, all with autograd off.

    >>> reduce_scatter_hook_host_s(128, 13e-6) == 2 * reduce_scatter_hook_host_s(64, 13e-6)
    True
    >>> reduce_scatter_hook_host_s(1, 13e-6)
    0.0
    """
    if dp <= 1:
        return 0.0
    return dp * dispatch_s * SLICE_OP_FRACTION * (1.0 + BACKWARD_DISPATCH_FRACTION)


def all_gather_copy_host_s(dp: int, tensors: int, dispatch_s: float) -> float:
    """CPU time of the ZeRO-1 parameter all-gather's flattens and copies on one rank holding
    `tensors` parameter tensors: `dp` Python flattens, `dp` C++ copies out of the flat result and
    `dp * tensors` Python `copy_` calls, all with autograd off.

    >>> all_gather_copy_host_s(128, 170, 13e-6) > all_gather_copy_host_s(64, 170, 13e-6) > 0
    True
    >>> all_gather_copy_host_s(1, 170, 13e-6)
    0.0
    """
    if dp <= 1:
        return 0.0
    return dp * dispatch_s * SLICE_OP_FRACTION * (1.0 + BACKWARD_DISPATCH_FRACTION + tensors)


def shard_views_host_s(dp: int, dispatch_s: float) -> float:
    """CPU time of Megatron-Core's `shard_buffer` on one bucket: `dp` Python slicing calls, each a view.

    >>> shard_views_host_s(64, 13e-6) == 2 * shard_views_host_s(32, 13e-6) > 0
    True
    >>> shard_views_host_s(1, 13e-6)
    0.0
    """
    if dp <= 1:
        return 0.0
    return dp * dispatch_s * VIEW_OP_FRACTION
