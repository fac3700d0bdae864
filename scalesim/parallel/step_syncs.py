"""HF Trainer's host sync after each micro-batch's backward: its NaN/inf loss filter (`training.loss_check_host_sync`).

After every `training_step` (forward and `loss.backward()`), Trainer._run_epoch checks the detached loss
with `args.logging_nan_inf_filter and not is_torch_xla_available() and (torch.isnan(tr_loss_step) or
torch.isinf(tr_loss_step))` (huggingface/transformers v5.25.0 src/transformers/trainer.py:1956-1959;
`logging_nan_inf_filter` defaults to True, training_args.py:1022-1023). `or` takes the truth value of a
one-element CUDA tensor: a copy to the host that returns only once the GPU queue ahead of it is done, so
the host waits once per micro-batch for its backward (a second wait for `isinf` finds the queue empty:
back-to-back syncs cost as one). The loss total stays on the device (`self._tr_loss += tr_loss_step`,
:1968; read with `.item()` only at logging steps, :2294); outside DeepSpeed the gradient norm stays a
tensor too (`_get_grad_norm`, :2834-2845: `.item()` only under DeepSpeed; logged at logging steps, :2301),
so the optimizer step adds no sync of its own beyond the step's closing one (parallel/optimizer_tail.py).

On the micro-batch that reduces the gradients the check also waits for their reductions: DDP's and
FSDP's end-of-backward callbacks make the compute stream wait for the gradient collectives, and the
`isnan` kernel is queued behind them. The clip and optimizer launches (the step's tail) are issued after
it, so their host time is no longer hidden under the GPU's backward. Trainer has no pipeline
parallelism: the sync closes the backward of model chunk 0 (the whole model at pp 1).
"""

from __future__ import annotations

CHECK_OPS = 2       # isnan, isinf: one op each, as a multiple of one eager op's dispatch (costs/host.py)
NAME = "loss nan/inf check (host sync)"


def applies(plan, g: int) -> bool:
    """Whether the backward of model chunk `g` ends with the loss check's host sync: the plan's key, a host
    model (host_dispatch_s > 0), the chunk that ends the backward."""
    return plan.loss_check_host_sync and plan.host_dispatch_s > 0 and g == 0


def loss_checked(rp, g: int, mb: int, dep: int | None) -> int | None:
    """After micro-batch `mb`'s backward of chunk `g` (ending on task `dep`) of RankProgram `rp`: the host's
    check of the loss where it `applies`; returns what comes next waits for. On the last micro-batch the sync
    also waits for the gradient reductions launched so far (module docstring)."""
    plan = rp.plan
    if dep is None or not applies(plan, g):
        return dep
    final = mb == plan.micro_batches - 1
    waits = tuple(r for r in rp.reductions + rp.overlapped if r is not None) if final else ()
    return rp.compute(NAME, "other", 0.0, 0.0, deps=(dep,) + waits, host_s=CHECK_OPS * plan.host_dispatch_s,
                      host_sync=True)
