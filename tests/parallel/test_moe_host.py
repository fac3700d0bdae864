"""The host side of MoE layers: the dispatcher's token-count sync and the per-expert GEMM launches."""

from dataclasses import replace

from scalesim.app.setup import prepare, simulate_setup
from scalesim.costs.host import ALLTOALL_PATH_HOST_S, EXPERT_MLP_HOST_S, dispatcher_host_sync, expert_gemm_launches, expert_host_s
from scalesim.engine import simulate
from scalesim.models.moe import grouped_gemm_op
from scalesim.models.spec import LayerSpec
from scalesim.program import ComputeTask
from scalesim.scenario import Scenario

TINY_MOE = {"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 8, "vocab": 1000, "ffn": "swiglu",
            "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048}}


def scenario(model=TINY_MOE, micro_batches=2, checkpointing="none", **parallel):
    training = {"precision": "bf16", "seq_len": 1024, "global_batch": 8 * micro_batches, "micro_batch": 1,
                "activation_checkpointing": checkpointing}
    return Scenario.model_validate({"name": "tiny moe", "cluster": {"node": "dgx-h100"}, "model": model,
                                    "training": training, "parallel": {"dp": 8, **parallel}})


def syncs(setup, kind):
    return [t for t in setup.step.program.tasks[0] if isinstance(t, ComputeTask) and t.host_sync and t.kind == kind]


def test_each_moe_layer_forward_waits_once_for_the_token_counts_and_backward_never():
    setup = prepare(scenario(ep=8))
    assert len(syncs(setup, "forward")) == 2 * 2            # 2 MoE layers x 2 micro-batches
    assert syncs(setup, "backward") == []
    assert all("token-count sync" in t.name for t in syncs(setup, "forward"))


def test_full_recomputation_replays_the_sync_with_the_forward():
    setup = prepare(scenario(ep=8, checkpointing="full"))
    assert len(syncs(setup, "recompute")) == len(syncs(setup, "forward")) == 4


def test_drop_and_pad_to_capacity_knows_its_shapes_and_does_not_sync():
    padded = {**TINY_MOE, "moe": {**TINY_MOE["moe"], "capacity_factor": 1.25}}
    assert syncs(prepare(scenario(padded, ep=8)), "forward") == []
    assert dispatcher_host_sync(None) and not dispatcher_host_sync(1.25)


def test_a_dense_model_has_no_token_count_sync():
    dense = {k: v for k, v in TINY_MOE.items() if k != "moe"}
    assert syncs(prepare(scenario(dense)), "forward") == []


def test_the_sync_never_makes_a_step_faster():
    setup = prepare(scenario(ep=8, micro_batches=4))
    program = setup.step.program
    unsynced = {r: tuple(replace(t, host_sync=False) if isinstance(t, ComputeTask) and t.kind != "optimizer" else t
                         for t in ts) for r, ts in program.tasks.items()}
    free = simulate(replace(program, tasks=unsynced))
    assert simulate_setup(setup).end_s >= free.end_s


def test_more_local_experts_launch_more_gemms_and_one_expert_launches_no_extra():
    def launches(groups):
        op = grouped_gemm_op("expert_up", groups, 4096.0, 768, 2048)
        return expert_gemm_launches(LayerSpec("b", "transformer_block", 0, (op,), 0.0))
    assert launches(1) == (0, 0)
    assert launches(4) < launches(16)
    assert launches(16)[1] == 2 * launches(16)[0]            # data- and weight-gradient GEMMs per expert


def forward_host_s(model, cuda_graphs):
    s = scenario(model, ep=8).model_dump()
    s["training"]["cuda_graphs"] = cuda_graphs
    tasks = prepare(Scenario.model_validate(s)).step.program.tasks[0]
    return {t.name.split(" + ")[0]: t.host_s for t in tasks if t.kind == "forward" and t.name.startswith("fwd block0.")}


def test_cuda_graphs_leave_dropless_experts_eager_but_capture_them_when_padded_to_capacity():
    eager, graphed = forward_host_s(TINY_MOE, False), forward_host_s(TINY_MOE, True)
    assert graphed["fwd block0.0"] < eager["fwd block0.0"]        # attention: captured
    assert graphed["fwd block0.2"] == eager["fwd block0.2"]       # dropless experts: launched one by one
    padded = {**TINY_MOE, "moe": {**TINY_MOE["moe"], "capacity_factor": 1.25}}
    assert forward_host_s(padded, True)["fwd block0.2"] < forward_host_s(padded, False)["fwd block0.2"]


def test_expert_host_time_is_the_measured_grouped_mlp_cost_per_expert_and_shrinks_with_a_faster_host():
    op = grouped_gemm_op("expert_up", 64, 4096.0, 128, 128)
    layer = LayerSpec("b", "transformer_block", 0, (op,), 0.0)
    forward, backward = expert_host_s(layer, 13e-6, graphed=False)
    # TransformerEngine issue #2897: grouped MLP block, 64 experts, GB200: ~1.2 ms forward, ~2.1 ms backward
    assert (forward, backward) == (64 * EXPERT_MLP_HOST_S[0], 64 * EXPERT_MLP_HOST_S[1])
    assert forward * 1e3 == 1.2 and round(backward * 1e3, 9) == 2.1
    assert expert_host_s(layer, 6.5e-6, graphed=False)[0] < forward
    assert expert_host_s(layer, 13e-6, graphed=True)[0] < forward          # graph nodes only


def test_the_all_to_all_dispatchers_eager_path_is_issued_after_the_sync_and_backward_replays_less():
    def host(dispatcher):
        s = scenario(ep=8).model_dump()
        s["parallel"]["moe_dispatcher"] = dispatcher
        tasks = prepare(Scenario.model_validate(s)).step.program.tasks[0]
        named = {t.name.split(" + ")[0]: t.host_s for t in tasks if t.kind in ("forward", "backward")}
        return named["fwd block0.2"], named["bwd block0.2"]
    (fwd_a2a, bwd_a2a), (fwd_flex, bwd_flex) = host("alltoall"), host("flex")
    # the experts' part (after the token-count sync) carries the dispatcher's path: milliseconds on the host
    assert fwd_a2a - fwd_flex == ALLTOALL_PATH_HOST_S > 1e-3
    assert 0 < bwd_a2a - bwd_flex < fwd_a2a - fwd_flex          # autograd replays it without Python


def test_the_dispatcher_path_is_the_measured_moe_mlp_less_its_router_and_its_experts():
    # yanring/Megatron-MoE-ModelZoo issue #7 (8 B200, EP8, 16 local experts): NVTX medians, ms
    mlp, router = 7.216, 1.871
    assert abs((ALLTOALL_PATH_HOST_S + 16 * EXPERT_MLP_HOST_S[0]) * 1e3 - (mlp - router)) < 1e-9


def test_an_all_to_all_dispatcher_on_a_slow_host_makes_a_small_moe_step_host_bound():
    def step(dispatcher):
        s = scenario(ep=8, micro_batches=4).model_dump()
        s["parallel"]["moe_dispatcher"] = dispatcher
        return simulate_setup(prepare(Scenario.model_validate(s))).end_s
    assert step("alltoall") > step("flex")
