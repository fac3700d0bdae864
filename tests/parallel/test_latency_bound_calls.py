"""A latency-bound call (a gradient norm, FP8 amaxes) is planned without its group's symmetric copies:
their shared links would move its end by under 1.4 us, and planning them for thousands of servers cost
most of a 16,384-GPU build. A call with bytes to move still carries them (their flows share its links)."""

from scalesim.collectives import LATENCY_BOUND_BYTES, plan_collective
from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement
from scalesim.parallel.builder import StepBuilder
from scalesim.topology import Fabric, build_cluster, load_node_design

# Two servers joined by one NIC each: every data-parallel group (one per TP rank) crosses the same NIC.
TOPO = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric("ib-ndr", 1, "single-switch"))
MODEL = get_model({"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000}, seq_len=1024)
PLAN = ParallelPlan(Placement(tp=8, cp=1, dp=2, pp=1), 1, 1, "bf16", "adamw", "none", "flash")


def _flows(plan):
    return sum(len(phase.flows) for phase in plan.phases)


def test_a_latency_bound_call_is_planned_alone_and_a_large_one_with_the_copies_sharing_its_links():
    builder = StepBuilder(MODEL, TOPO.gpu_spec, TOPO, PLAN)
    group = (PLAN.placement.rank(tp=0, cp=0, dp=0, pp=0), PLAN.placement.rank(tp=0, cp=0, dp=1, pp=0))
    tiny = builder._with_copies("all_reduce", group, 4.0, ("dp",))
    assert _flows(tiny) == _flows(plan_collective("all_reduce", TOPO, group, 4.0))
    big = 64 * LATENCY_BOUND_BYTES * 1024
    shared = builder._with_copies("all_reduce", group, big, ("dp",))
    assert _flows(shared) > _flows(plan_collective("all_reduce", TOPO, group, big))
