"""What the run table says of host-bound time, from the result alone (`StepResult.host`,
app/host_causes.py): what would actually cut it, or nothing when it is small or its cause is unknown.

CUDA graphs replace the layers' kernel launches (costs/host.py launch_host_s), so they are named only
when launching layer kernels is the main host cost, they are off, and most of those launches are not in
dropless MoE experts, which run eagerly even with graphs (costs/host.py outside_cuda_graphs). PyTorch FSDP's hooks and FSDP1's
rate-limiter waits (costs/fsdp_host.py, parallel/fsdp_limiter.py) run outside any graph: there FSDP2
(no rate limiter, parallel.fsdp_version: 2), larger units or fewer original parameters per unit help.
CUDA graphs are named only for a plan that can run them (`cuda_graphs_blocked_by`, scenario/graphs.py):
FSDP1 and DeepSpeed ZeRO-3 cannot, and FSDP2 runs them as torch.compile's per-block graphs. For the
others, fewer micro-batches per step (a larger micro-batch) launch each layer's kernels fewer times.
"""

from __future__ import annotations

from scalesim.result import StepResult

# Below this share of the step, host-bound time is reported without advice.
SMALL_SHARE = 0.05
# A cause of the host's CPU time is named, with what cuts it, from this share of that time up.
MAJOR_SHARE = 0.25
WHAT = "GPU waits for the CPU to issue its work"


def host_bound_note(r: StepResult) -> str:
    """The explanation after the host-bound time in `scalesim run`'s table: the main causes of the
    host's CPU time, largest first, each with what would cut it."""
    host, bound = r.host or {}, r.breakdown.host_bound
    cpu = host.get("cpu_s")
    total = sum(cpu.values()) if cpu else 0.0
    if total <= 0 or bound < SMALL_SHARE * r.step_time_s:
        return WHAT
    plan = getattr(r, "plan", None) or {}
    causes = sorted(((seconds / total, name) for name, seconds in cpu.items() if seconds >= MAJOR_SHARE * total),
                    reverse=True)
    return f"{WHAT}; the host's CPU time: " + "; ".join(
        f"{share:.0%} {_CAUSES[name](host, plan)}" for share, name in causes if name in _CAUSES)


def _layer_kernels(host: dict, plan: dict) -> str:
    if host.get("cuda_graphs"):
        return "launching the layers' kernels, already as CUDA graphs (what is left runs outside the graphs)"
    layer = (host.get("cpu_s") or {}).get("layer_kernels", 0.0)
    eager = host.get("layer_kernels_outside_graphs_s") or 0.0
    if layer > 0 and eager >= 0.5 * layer:
        return (f"launching the layers' kernels one by one, {eager / layer:.0%} of it in dropless MoE experts "
                "(the host reads their token counts every step: CUDA graphs do not capture them)")
    blocker = host.get("cuda_graphs_blocked_by")
    if blocker is None:
        graphs = ("training.cuda_graphs, each block under torch.compile(mode=\"reduce-overhead\"), removes most of it"
                  if host.get("fsdp_version") == 2 else "training.cuda_graphs removes most of it")
        return f"launching the layers' kernels one by one ({graphs})"
    fewer = ("a larger training.micro_batch (fewer micro-batches per step) launches them fewer times; "
             if (plan.get("micro_batches") or 1) > 1 else "")
    return (f"launching the layers' kernels one by one (CUDA graphs cannot capture {blocker}'s layers: {fewer}"
            "FSDP2, parallel.fsdp_version: 2 with training.cuda_graphs, runs each block as torch.compile's graphs)")


def _fsdp(host: dict, plan: dict) -> str:
    limiter = (host.get("blocking_syncs") or {}).get("fsdp_rate_limiter", 0)
    waits = f", FSDP1's rate limiter blocking the host at {limiter:,} unshards" if limiter else ""
    fixes = ("FSDP2 (parallel.fsdp_version: 2), larger units or fewer parameters per unit do"
             if host.get("fsdp_version") == 1 else "larger units or fewer parameters per unit do")
    return f"PyTorch FSDP's hooks{waits} (CUDA graphs do not remove these; {fixes})"


def _other(host: dict, plan: dict) -> str:
    syncs = (host.get("blocking_syncs") or {}).get("other", 0)
    return ("host work outside the layers: optimizer, gradient hooks, collective calls"
            + (f", {syncs:,} blocking syncs" if syncs else "") + " (CUDA graphs do not remove it)")


_CAUSES = {"layer_kernels": _layer_kernels, "fsdp": _fsdp, "other": _other}
