"""Expert parallelism: groups, all-to-all flows, imbalance and expert memory, on a small MoE."""

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.parallel.builder import build_program
from scalesim.parallel.experts import expert_groups
from scalesim.parallel.placement import Placement
from scalesim.program import CollectiveTask
from scalesim.app.setup import memory_of, prepare, simulate_setup
from scalesim.scenario import Scenario

TINY_MOE = {"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 1000, "ffn": "swiglu",
            "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048}}


def scenario(node="dgx-h100", **parallel):
    training = {"precision": "bf16", "seq_len": 1024, "global_batch": 16, "micro_batch": 1}
    training.update(parallel.pop("training", {}))
    return Scenario.model_validate({"name": "tiny moe", "cluster": {"node": node}, "model": TINY_MOE,
                                    "training": training, "parallel": {"dp": 8, **parallel}})


def test_expert_parallel_peers_are_neighbours_and_expert_data_parallel_peers_the_rest():
    pl = Placement(tp=2, cp=1, dp=8, pp=1, ep=4)
    ep_group, edp_group = expert_groups(pl, 4, pl.coords(0))
    assert ep_group == (0, 2, 4, 6)                   # same tp index, consecutive data positions
    assert edp_group == (0, 8)                        # holds the same experts: reduces their gradients
    groups = {expert_groups(pl, 4, pl.coords(r))[0] for r in range(pl.size)}
    assert sorted(r for g in groups for r in g) == list(range(pl.size))   # a partition of the GPUs


@pytest.mark.parametrize("node", ["dgx-h100", "rtx4090-pcie-8"])
def test_all_to_all_bytes_sent_equal_bytes_received(node):
    setup = prepare(scenario(node, ep=8))
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=False)
    a2a = [t.plan for tasks in program.tasks.values() for t in tasks
           if isinstance(t, CollectiveTask) and t.plan.op == "all_to_all"]
    assert a2a, "expert parallelism dispatches and combines with all-to-alls"
    for plan in a2a:
        sent, received = {}, {}
        for flow in (f for p in plan.phases for f in p.flows):
            sent[flow.src] = sent.get(flow.src, 0.0) + flow.size_bytes
            received[flow.dst] = received.get(flow.dst, 0.0) + flow.size_bytes
        assert sent == pytest.approx(received)        # every GPU receives as much as it sends
    timeline = simulate_setup(setup, symmetric=False)
    assert timeline.bytes_sent == pytest.approx(timeline.bytes_delivered)


def test_more_imbalance_is_never_faster():
    times = [simulate_setup(prepare(scenario(ep=8, training={"moe_imbalance": x}))).end_s for x in (1.0, 1.5, 3.0)]
    assert times[0] <= times[1] <= times[2]
    assert times[0] < times[2]


def test_all_to_all_takes_a_larger_share_through_host_memory_than_over_nvswitch():
    def share(node):
        timeline = simulate_setup(prepare(scenario(node, ep=8)))
        a2a = sum(i.end_s - i.start_s for i in timeline.for_rank(0) if i.name.startswith(("ep_dispatch", "ep_combine")))
        return a2a / timeline.end_s

    assert share("rtx4090-pcie-8") > share("dgx-h100") > 0


def test_expert_memory_scales_as_one_over_ep():
    weights = {ep: memory_of(prepare(scenario(ep=ep))).weights for ep in (1, 2, 4)}
    # weights = dense + experts / ep: halving from ep 1 to 2 saves twice what 2 to 4 saves
    assert weights[1] - weights[2] == pytest.approx(2 * (weights[2] - weights[4]))
    assert weights[4] < weights[2] < weights[1]


@pytest.mark.parametrize("ep", [3, 16])
def test_ep_that_does_not_divide_experts_and_data_ranks_is_refused(ep):
    with pytest.raises(InputError) as info:
        prepare(scenario(ep=ep))
    assert info.value.key == "parallel.ep" and "allowed: 1, 2, 4, 8" in str(info.value)


@pytest.mark.parametrize("imbalance", [4.5, 1e300])
def test_an_imbalance_above_every_token_on_one_expert_is_refused(imbalance):
    """The busiest of 8 experts at top_k 2 receives at most every token: 4 x the mean (fuzz15: 1e300 was an
    OverflowError traceback, 1e30 ran as a step that does not fit)."""
    with pytest.raises(InputError) as info:
        prepare(scenario(ep=8, training={"moe_imbalance": imbalance}))
    assert info.value.key == "training.moe_imbalance" and "allowed: 1 to 4" in str(info.value)
    prepare(scenario(ep=8, training={"moe_imbalance": 4.0}))      # every token's two experts the same two


def test_ep_on_a_dense_model_exits_2_naming_the_key(tmp_path):
    data = yaml.safe_load(open("scenarios/8x4090-ddp.yaml"))
    data.setdefault("parallel", {})["ep"] = 2
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "parallel.ep" in result.output and "Traceback" not in result.output


def test_whole_experts_cut_expert_parallelism_from_tensor_parallel_ranks_too():
    pl = Placement(tp=2, cp=1, dp=4, pp=1, ep=8, etp=1)
    ep_group, edp_group = expert_groups(pl, 8, pl.coords(3))
    assert ep_group == tuple(range(8)) and edp_group == (3,)


def test_whole_experts_hold_tp_times_the_expert_weights_of_split_ones():
    split = memory_of(prepare(scenario(tp=2, dp=4, ep=4, sequence_parallel=True)))
    whole = memory_of(prepare(scenario(tp=2, dp=4, ep=4, etp=1, sequence_parallel=True)))
    assert whole.weights > split.weights


def test_an_unknown_moe_key_is_refused_with_the_allowed_ones():
    bad = {**TINY_MOE, "moe": {**TINY_MOE["moe"], "topk": 2}}
    with pytest.raises(InputError) as info:
        prepare(Scenario.model_validate({**scenario().model_dump(), "model": bad}))
    assert info.value.key == "model.moe.topk" and "top_k" in str(info.value)


def test_overlapping_the_all_to_alls_is_never_slower():
    blocking = simulate_setup(prepare(scenario("rtx4090-pcie-8", ep=8))).end_s
    overlapped = simulate_setup(prepare(scenario("rtx4090-pcie-8", ep=8, moe_overlap=True))).end_s
    assert overlapped <= blocking


def test_flex_dispatch_carries_one_copy_per_destination_rank_never_more_than_top_k():
    from scalesim.models.spec import MoESpec
    from scalesim.parallel.experts import dispatch_copies
    moe = MoESpec(experts=128, top_k=8, expert_ffn_hidden=768)
    flex = [dispatch_copies(moe, ep, "flex") for ep in (2, 8, 32, 128)]
    assert all(f <= dispatch_copies(moe, ep, "alltoall") == 8 for f, ep in zip(flex, (2, 8, 32, 128)))
    assert flex == sorted(flex) and flex[-1] == pytest.approx(8)   # more ranks, fewer repeats; 1 expert/rank: none
    assert flex[0] <= 2                                            # a token reaches at most every rank once


def all_to_all_bytes(setup):
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=False)
    return sum(f.size_bytes for tasks in program.tasks.values() for t in tasks
               if isinstance(t, CollectiveTask) and t.plan.op == "all_to_all"
               for p in t.plan.phases for f in p.flows)


def test_the_all_to_all_dispatcher_moves_more_and_is_never_faster_than_flex_with_several_experts_per_rank():
    alltoall, flex = (prepare(scenario(ep=4, moe_dispatcher=d)) for d in ("alltoall", "flex"))   # 2 experts per rank
    assert all_to_all_bytes(alltoall) > all_to_all_bytes(flex) > 0
    assert simulate_setup(alltoall).end_s >= simulate_setup(flex).end_s


def _two_server_bytes(dispatcher):
    """(bytes between servers, bytes inside servers) of the all-to-alls of a 16-expert top-4 model over
    16 H100s in two servers, one expert per rank."""
    moe = {**TINY_MOE, "moe": {"experts": 16, "top_k": 4, "expert_ffn_hidden": 2048}}
    setup = prepare(Scenario.model_validate({
        "name": "two servers", "model": moe, "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 16,
                                                          "micro_batch": 1, "moe_imbalance": 1.0},
        "cluster": {"node": "dgx-h100", "nodes": 2, "fabric": {"link": "ib-ndr", "nics_per_node": 8,
                                                               "topology": "rail-optimized"}},
        "parallel": {"dp": 16, "ep": 16, "moe_dispatcher": dispatcher}}))
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=False)
    server = {setup.topology.node_of(r): setup.topology.server_of(r) for r in range(16)}
    between = inside = 0.0
    for t in (t for tasks in program.tasks.values() for t in tasks
              if isinstance(t, CollectiveTask) and t.plan.op == "all_to_all"):
        for f in (f for p in t.plan.phases for f in p.flows):
            if server[f.src] != server[f.dst]:
                between += f.size_bytes
            else:
                inside += f.size_bytes
    return between, inside


def test_flex_sends_a_token_to_another_server_at_most_once_and_fans_it_out_over_nvlink():
    # DeepEP's internode kernels: one RDMA copy per destination server, NVLink to the experts' ranks there;
    # NCCL's all-to-all sends every copy (top_k = 4 here, one expert per rank: the same rank copies)
    (flex_between, flex_inside), (a2a_between, a2a_inside) = _two_server_bytes("flex"), _two_server_bytes("alltoall")
    assert 0 < flex_between < a2a_between
    # all-to-all: 4 copies a token, half of them to the other server; flex: at most one copy there
    assert flex_between <= a2a_between / (4 * 0.5)
    assert flex_inside == pytest.approx(a2a_inside)       # the NVLink legs carry every rank copy either way


def test_group_limited_routing_reaches_at_most_group_topk_servers_and_fewer_ranks():
    from scalesim.models.spec import MoESpec
    from scalesim.parallel.experts import dispatch_copies, network_share
    free, limited = MoESpec(256, 8, 2048), MoESpec(256, 8, 2048, groups=8, group_topk=4)   # DeepSeek-V3's routing
    for ep, servers in ((64, 8), (64, 4), (32, 8)):
        assert dispatch_copies(limited, ep, "flex") < dispatch_copies(free, ep, "flex")
        server_copies = network_share(limited, ep, servers, "flex") * dispatch_copies(limited, ep, "flex")
        assert server_copies <= min(4, servers)                  # a token reaches at most 4 nodes (groups)
        assert server_copies < network_share(free, ep, servers, "flex") * dispatch_copies(free, ep, "flex")
    assert network_share(limited, 64, 1, "flex") == network_share(limited, 64, 8, "alltoall") == 1.0
