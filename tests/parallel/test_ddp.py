"""DDP as PyTorch runs it: buckets in backward order, reduce on the last micro-step only."""

from hypothesis import given
from hypothesis import strategies as st

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program, ddp_buckets
from scalesim.parallel.ddp import FIRST_BUCKET_BYTES
from scalesim.program import CollectiveTask, ComputeTask
from scalesim.topology import build_cluster, load_node_design


@given(st.lists(st.floats(0.0, 1e8), min_size=1, max_size=40), st.floats(1e5, 1e8))
def test_buckets_hold_every_gradient_byte_in_backward_order(grads, cap):
    buckets = ddp_buckets(grads, cap)
    assert abs(sum(b for b, _ in buckets) - sum(grads)) <= 1e-6 * max(1.0, sum(grads))
    ready = [layer for _, layer in buckets]
    assert ready == sorted(ready)
    # PyTorch caps the first bucket at 1 MiB and the rest at bucket_cap_mb.
    assert all(b <= max(cap, FIRST_BUCKET_BYTES) * (1 + 1e-9) for b, _ in buckets)


def program(micro_batches, overlap=True):
    model = get_model("gpt2-124m", seq_len=1024)
    topology = build_cluster(load_node_design("dgx-a100"))
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=8, pp=1), 4, micro_batches, "bf16", "adamw", "none", "flash",
                        overlap_grad_reduce=overlap)
    return model, build_program(model, topology.gpu_spec, topology, plan)


def test_reductions_happen_only_after_the_last_micro_step():
    model, prog = program(micro_batches=3)
    tasks = prog.tasks[0]
    forwards = [i for i, t in enumerate(tasks) if isinstance(t, ComputeTask) and t.kind == "forward"]
    third_forward_start = forwards[2 * len(model.layers)]
    reductions = [i for i, t in enumerate(tasks) if isinstance(t, CollectiveTask)]
    assert reductions and min(reductions) > third_forward_start
    # Every gradient byte is all-reduced exactly once.
    assert sum(tasks[i].plan.size_bytes for i in reductions) == model.params * 2


def test_every_rank_runs_the_same_work_and_the_optimizer_waits_for_all_buckets():
    _, prog = program(micro_batches=1)
    kinds = {tuple((type(t).__name__, getattr(t, "kind", "")) for t in prog.tasks[r]) for r in prog.tasks}
    assert len(kinds) == 1
    tasks = prog.tasks[0]
    reductions = {i for i, t in enumerate(tasks) if isinstance(t, CollectiveTask)}
    assert tasks[-1].kind == "optimizer" and reductions <= set(tasks[-1].deps)


def test_without_overlap_every_bucket_waits_for_the_whole_backward():
    _, prog = program(micro_batches=1, overlap=False)
    tasks = prog.tasks[0]
    last_backward = max(i for i, t in enumerate(tasks) if getattr(t, "kind", "") == "backward")
    assert all(t.deps == (last_backward,) for t in tasks if isinstance(t, CollectiveTask))


def test_gpu_work_knows_how_much_longer_it_takes_beside_each_call_its_rank_runs():
    # While a bucket's all-reduce runs, NCCL's blocks hold SMs; each backward is told its own
    # slow-down for that share (its GEMMs' tiles in waves over the SMs left): never a speed-up.
    _, prog = program(micro_batches=1)
    tasks = prog.tasks[0]
    shares = {t.sm_share for t in tasks if isinstance(t, CollectiveTask) and t.sm_share > 0}
    assert shares
    timed = [t for t in tasks if isinstance(t, ComputeTask) and t.kind in ("forward", "backward")]
    assert timed and all(t.held >= 0 for t in timed)
    pairs = {a + b for a in shares for b in shares if a + b < 1}       # two calls at once
    for row in {t.held for t in timed}:
        factors = prog.held_factors[row]
        assert {share for share, _ in factors} == shares | pairs
        assert all(factor >= 1.0 for _, factor in factors)
        # two calls holding SMs at once never cost less than one of them
        by_share = dict(factors)
        assert all(by_share[a + b] >= by_share[a] for a in shares for b in shares if a + b < 1)
    # The twelve identical transformer blocks share one row per pass.
    for kind in ("forward", "backward"):
        blocks = [t for t in timed if t.kind == kind and "block" in t.name]
        assert len(blocks) == 12 and len({t.held for t in blocks}) == 1
