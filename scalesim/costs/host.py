"""The host side of a training step: the CPU time that issues each task's kernels.

Eager PyTorch launches every kernel from a host thread: Python, the
dispatcher, autograd bookkeeping and `cudaLaunchKernel` run on the CPU before
the kernel can start. The GPU runs ahead of nothing: when kernels are shorter
than their dispatch (small models, small micro-batches, tensor-parallel
slices) it waits for the host. Pure functions: the builder attaches each
task's host time, the engine plays the host thread out.
"""

from __future__ import annotations

from scalesim.models.spec import LayerSpec

# CPU time to issue one eager PyTorch op from Python, seconds. NVIDIA's
# dgxc-benchmarking "Pytorch kernel launch latency" microbenchmark times a
# tiny GEMM called from Python in a loop, i.e. the full dispatch path with a
# kernel that takes no time: its published sample output gives 11.3-17.7 us
# per call over 8 sizes, median 13.0 us (NVIDIA/dgxc-benchmarking,
# microbenchmarks/cpu_overhead/README.md @ c3594cbd; run on the recipe's
# GB200/B200/H100 hosts). A node design may give its own figure
# (`host.dispatch_us_per_op`) for a faster or slower CPU.
DISPATCH_S_PER_OP = 13.0e-6

# Backward kernels are issued by autograd's C++ engine, not by Python: each
# still goes through the dispatcher and the CUDA launch, but skips the
# interpreter and the pybind11 boundary (~2 of the ~5-25 us, jiahuanglin.xyz
# "From PyTorch op to kernel launch"; PyTorch autograd engine design notes).
# ESTIMATE: a backward launch costs this fraction of a forward op.
BACKWARD_DISPATCH_FRACTION = 0.6

# CUDA graphs (Megatron-LM/Transformer Engine `make_graphed_callables`, one
# graph per layer and micro-batch) replace a layer's launches with one graph
# launch: measured ~15 us fixed plus ~0.58 us per kernel node on an RTX 5070
# Ti with CUDA 13 (ahrefs/ocannl issue #488, "Measured: what graph replay is
# actually worth", chains of 8-117 kernels).
GRAPH_LAUNCH_S = 15.0e-6
GRAPH_NODE_S = 0.58e-6

# Kernels an op launches, (forward, backward). GEMMs: one forward, data- and
# weight-gradient GEMMs backward. Norms: one fused kernel forward, input and
# parameter gradients backward (apex/TE fused LayerNorm). Flash attention: one
# kernel forward, its backward's pre-processing and main kernels. Attention
# with materialised scores runs its pieces as separate kernels: naive
# (eager: QK^T, scale, mask, softmax, dropout, AV), fused (Megatron: QK^T,
# fused scale-mask-softmax, dropout, AV); their backwards one kernel each
# again plus the second GEMM of each matmul.
KERNELS = {
    "gemm": (1, 2), "conv": (1, 2), "elementwise": (1, 1), "norm": (1, 2), "softmax": (1, 1),
    "embedding": (1, 1), "pool": (1, 1),
}
ATTENTION_KERNELS = {"naive": (6, 8), "fused": (4, 6)}
FLASH_ATTENTION_KERNELS = (1, 2)


def layer_kernels(layer: LayerSpec, attention: str) -> tuple[int, int, int]:
    """Kernels one micro-batch of the layer launches: (forward, backward, attention forward).

    The last is what selective recomputation re-runs."""
    forward = backward = attention_forward = 0
    for op in layer.ops:
        if op.kind == "attention":
            f, b = ATTENTION_KERNELS.get(attention, FLASH_ATTENTION_KERNELS)
            attention_forward += f
        else:
            f, b = KERNELS.get(op.kind, (1, 1))
        forward += f
        backward += b
    return forward, backward, attention_forward


def launch_host_s(kernels: int, dispatch_s: float, cuda_graphs: bool, backward: bool = False) -> float:
    """Host time to issue `kernels` kernels of one pass of one layer.

    >>> launch_host_s(10, 13e-6, False) == 10 * 13e-6
    True
    >>> launch_host_s(10, 13e-6, True) < launch_host_s(10, 13e-6, False)
    True
    """
    if kernels <= 0:
        return 0.0
    if cuda_graphs:
        return GRAPH_LAUNCH_S * (dispatch_s / DISPATCH_S_PER_OP) + kernels * GRAPH_NODE_S
    return kernels * dispatch_s * (BACKWARD_DISPATCH_FRACTION if backward else 1.0)
