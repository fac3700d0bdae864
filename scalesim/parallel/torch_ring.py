"""PyTorch's experimental ring attention as torchtitan runs it (`parallel.cp_comm_type: torch_ring`).

torch.distributed.tensor.experimental's context_parallel (torch/distributed/tensor/experimental/_attention.py,
the stored copies f2127dbd and 0123248a; torchtitan 9dec370 runs it with `--experimental.
context_parallel_rotate_method` default "allgather"; validation/context-parallel-notes.md reads both):

- forward, and again in a recomputed forward: `_AllGatherRotater` all-gathers K and V once (CP x the local
  K and V) before the ring's kernels, which are TE's p2p ring's kernels (costs/context_chunks.py);
- backward: K and V all-gathered again, and after every one of the CP steps the accumulated dK, dV
  (`accum_dtype = torch.float32` with `convert_to_f32 = True`, the default) go to the next rank by
  `_AllToAllRotater` (`ft_c.permute_tensor(curr_buffer, dsts)`: every rank sends its whole buffer to
  rank + 1), the last one waited after the loop: CP hops of the local dK and dV in fp32;
- K and V are what SDPA receives: the flash backend of that period takes as many key/value heads as
  query heads, and torchtitan's Llama repeats the KV heads before SDPA (models/llama/model.py repeat_kv),
  so every exchange carries all the query heads (of this TP rank);
- the blocks are compiled with the ring traced in, and a traced functional collective returns its
  waited tensor at once (`_functional_collectives._maybe_wrap_tensor`: `if _are_we_tracing(): return
  wait_tensor(self)`), so each all-gather and hop is waited where issued: on the compute path.
  An eager run would hide the forward's gather and all but the last hop behind the ring's kernels;
  that case is not modelled.
"""

from __future__ import annotations

FP32_BYTES = 4


def gradient_hops(rp, wait: int, hop_bytes: float) -> int:
    """Backward's CP hops of a rank's fp32 dK and dV (`hop_bytes` each) after a block's attention half,
    one after another on the compute path; returns what follows waits for."""
    for _ in range(rp.pl.cp):
        sent = rp.call("cp", "send_recv", rp.cp_group, hop_bytes, "cp", (wait,), ("cp",))
        wait = wait if sent is None else sent
    return wait
