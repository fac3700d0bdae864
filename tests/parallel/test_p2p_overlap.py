"""Pipeline P2P with and without Megatron's overlap_p2p_comm: without it the host waits on each receive."""

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import build_cluster, load_node_design

DGX = build_cluster(load_node_design("dgx-a100"))
MODEL = get_model({"kind": "transformer", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000}, seq_len=512)


def receives(schedule, overlap):
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=1, pp=4), 1, 8, "bf16", "adamw", "none", "flash",
                        schedule=schedule, virtual_stages=2 if schedule == "interleaved" else 1,
                        overlap_p2p_comm=overlap, host_dispatch_s=10e-6)
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, plan).tasks[1]
    return [t for t in tasks if isinstance(t, CollectiveTask) and t.stream.startswith("pp_recv")]


def test_interleaved_overlaps_its_p2p_unless_told_not_to_as_megatron_of_2021():
    assert receives("interleaved", None) and not any(t.host_sync for t in receives("interleaved", None))
    # overlap_p2p_comm false: each batched exchange ends on a synchronize (parallel/p2p_batched.py)
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=1, pp=4), 1, 8, "bf16", "adamw", "none", "flash",
                        schedule="interleaved", virtual_stages=2, overlap_p2p_comm=False, host_dispatch_s=10e-6)
    tasks = build_program(MODEL, DGX.gpu_spec, DGX, plan).tasks[1]
    syncs = [i for i, t in enumerate(tasks) if t.name == "pp synchronize"]
    assert syncs and all(tasks[i].host_sync for i in syncs)
    assert all(any(r in tasks[i].deps for i in syncs) for r, t in enumerate(tasks)
               if isinstance(t, CollectiveTask) and t.stream.startswith("pp_recv"))


def test_one_f_one_b_syncs_after_each_receive_unless_overlapped():
    assert all(t.host_sync for t in receives("1f1b", None))
    assert not any(t.host_sync for t in receives("1f1b", True))
