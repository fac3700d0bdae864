"""Per-communicator NCCL CTA limits (parallel.nccl_max_ctas): dp covers the dp x cp gradient and
parameter collectives, cp the key/value exchange, ep the expert all-to-alls; each call holds no more SMs
than its limit."""

from scalesim.models import get_model
from scalesim.parallel import ParallelPlan, Placement, build_program
from scalesim.program import CollectiveTask
from scalesim.topology import Fabric, build_cluster, load_node_design

TWO = build_cluster(load_node_design("dgx-h100"), nodes=2, fabric=Fabric(link="ib-ndr", nics_per_node=8))
MODEL = get_model({"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000,
                   "ffn": "swiglu", "ffn_hidden": 2816}, seq_len=2048)


def calls(ctas) -> dict[str, CollectiveTask]:
    plan = ParallelPlan(Placement(tp=1, cp=2, dp=8, pp=1), 1, 1, "bf16", "adamw", "none", "flash", zero=1,
                        overlap_param_gather=True, nccl_max_ctas=ctas)
    tasks = build_program(MODEL, TWO.gpu_spec, TWO, plan).tasks[0]
    return {t.name: t for t in tasks if isinstance(t, CollectiveTask)}


def test_limits_apply_to_their_communicator_only():
    sms = TWO.gpu_spec.sms
    free, dp_only, both = calls(()), calls((("dp", 8),)), calls((("dp", 8), ("cp", 1)))
    assert dp_only["grad reduce_scatter"].sm_share == 8 / sms < free["grad reduce_scatter"].sm_share
    assert dp_only["cp all_gather"].sm_share == free["cp all_gather"].sm_share
    assert both["cp all_gather"].sm_share == 1 / sms
    capped = [f.rate_cap_bytes_per_s for p in dp_only["grad reduce_scatter"].plan.phases for f in p.flows]
    assert all(c < float("inf") for c in capped)
    assert all(f.rate_cap_bytes_per_s == float("inf")
               for p in free["grad reduce_scatter"].plan.phases for f in p.flows)


TINY_MOE = get_model({"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000,
                      "ffn": "swiglu", "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048}}, seq_len=2048)


def moe_calls(ctas) -> dict[str, CollectiveTask]:
    plan = ParallelPlan(Placement(tp=1, cp=1, dp=16, pp=1, ep=8), 1, 1, "bf16", "adamw", "none", "flash", zero=1,
                        nccl_max_ctas=ctas)
    tasks = build_program(TINY_MOE, TWO.gpu_spec, TWO, plan).tasks[0]
    return {t.name: t for t in tasks if isinstance(t, CollectiveTask)}


def test_the_ep_limit_holds_the_expert_all_to_alls_and_the_dp_limit_does_not():
    # The dispatch / combine all-to-alls run on the expert-parallel communicator, whose span
    # includes dp: the ep limit is theirs, the dp limit the gradient collectives'.
    sms = TWO.gpu_spec.sms
    free, ep_only, dp_only = moe_calls(()), moe_calls((("ep", 1),)), moe_calls((("dp", 1),))
    assert free["ep_dispatch all_to_all"].sm_share > 1 / sms
    assert ep_only["ep_dispatch all_to_all"].sm_share == ep_only["ep_combine all_to_all"].sm_share == 1 / sms
    assert dp_only["ep_dispatch all_to_all"].sm_share == free["ep_dispatch all_to_all"].sm_share
    assert dp_only["grad reduce_scatter"].sm_share == 1 / sms
    assert ep_only["grad reduce_scatter"].sm_share == free["grad reduce_scatter"].sm_share
