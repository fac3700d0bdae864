"""Megatron's aligned gradient reductions in the interleaved pipeline schedule (align_grad_reduce).

With overlapped gradient reduction, Megatron-LM (megatron/training/training.py: `--align-grad-reduce`,
on by default) and NeMo (nemo/lightning/megatron_parallel.py extract_ddp_funcs: `delay_grad_reduce`,
True by default) give the schedule each model chunk's `start_grad_sync` as `config.grad_sync_func`.
forward_backward_pipelining_with_interleaving then keeps `no_sync` on through every backward, so no
bucket is launched from the backward hooks, and after the backward of virtual micro-batch k, before
that pass's P2P send, it launches every bucket of the chunk whose last micro-batch was pass
k - pipeline rank: "we launch asynchronous communication at the same time across the pipeline-parallel
group" (backward_step_helper_postprocess). Chunks not yet launched when the cooldown ends are launched
then, in chunk order (megatron/core/pipeline_parallel/schedules.py @d98e8a64).

Launched from the chunk's last backward instead (the `grad_sync_func is None` path), each stage's
bucket NaN checks and views (megatron_dp.py) sit on that micro-batch's way through every stage in turn
and add up along the pipeline at each chunk's end of the cooldown; staggered by rank they fall on
different micro-batches.
"""

from __future__ import annotations


def applies(rp) -> bool:
    """The rank's dense buckets are reduced as the interleaved schedule aligns them."""
    plan = rp.plan
    return plan.chunks_per_stage > 1 and plan.overlap_grad_reduce and plan.zero < 3 and len(rp.grad_group) > 1


class AlignedGradSync:
    """Holds each chunk's buckets from its last backward until the pass the schedule launches them after."""

    def __init__(self, rp):
        self.on = applies(rp)       # the program itself is not kept: no reference cycle through its tasks
        self.held: dict[int, tuple[list, int | None]] = {}     # global chunk -> (buckets, their gradients' task)
        self.due: dict[int, int] = {}                          # backward pass index -> global chunk

    def hold(self, g: int, pending: list, dep: int | None) -> list:
        """The buckets of chunk `g`'s last backward (ready after task `dep`) to reduce now: none when aligned."""
        if not self.on or not pending:
            return pending
        self.held[g] = (pending, dep)
        return []

    def passes(self, rp, passes):
        """`passes` (p2p_batched.passes of RankProgram `rp`) with each held chunk's buckets launched after the backward pass
        `stage` passes after the chunk's last, before that pass's batched exchange, and the rest at the end."""
        if not self.on:
            yield from passes
            return
        last, backwards = rp.plan.micro_batches - 1, 0
        for kind, mb, local_chunk in passes:
            yield kind, mb, local_chunk
            if kind != "B":
                continue
            if mb == last:
                self.due[backwards + rp.stage] = local_chunk * rp.pl.pp + rp.stage
            if backwards in self.due:
                self._launch(rp, self.due.pop(backwards))
            backwards += 1
        for g in sorted(self.due.values()):
            self._launch(rp, g)

    def _launch(self, rp, g: int) -> None:
        pending, dep = self.held.pop(g, ([], None))
        for size, _, calls in pending:
            rp._reduce_bucket(size, dep, calls)
