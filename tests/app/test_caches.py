"""A command reuses the clusters it builds and the plans on them; nothing outlives its Caches."""

from scalesim.app.caches import CLUSTERS_KEPT, Caches
from scalesim.app.setup import prepare
from scalesim.engine import simulate
from scalesim.scenario import Scenario
from scalesim.topology import Fabric, load_node_design


def test_the_same_cluster_is_built_once_and_a_different_one_is_not_confused_with_it():
    caches = Caches()
    design = load_node_design("dgx-h100")
    fabric = Fabric("ib-ndr", 8, "rail-optimized")
    first = caches.cluster(design, 2, fabric, None)
    assert caches.cluster(design, 2, fabric, None) is first
    other = caches.cluster(design, 3, fabric, None)
    assert other is not first and len(other.gpus) == 24
    assert caches.cluster(design, 2, Fabric("ib-hdr", 8, "rail-optimized"), None) is not first
    assert Caches().cluster(design, 2, fabric, None) is not first       # another command builds its own


def test_an_evicted_cluster_takes_its_plans_with_it():
    caches = Caches()
    design = load_node_design("dgx-h100")
    first = caches.cluster(design, 1, None, None)
    caches.memo(first)["plan"] = "kept"
    for nodes in range(2, CLUSTERS_KEPT + 2):
        caches.cluster(design, nodes, Fabric("ib-ndr", 8, "rail-optimized"), None)
    assert len(caches.clusters) == CLUSTERS_KEPT and id(first) not in caches.memos


SCENARIO = {"name": "t", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "gpt2-124m",
            "training": {"global_batch": 64, "micro_batch": 8, "seq_len": 1024, "precision": "bf16"}}


def test_steps_prepared_with_shared_caches_simulate_as_steps_prepared_alone():
    scenario = Scenario.model_validate(SCENARIO)
    shared = Caches()
    warm = prepare(scenario, caches=shared)
    warm.step.program                   # fills the plans of this cluster
    again = prepare(scenario, caches=shared)
    alone = prepare(scenario)
    assert again.topology is warm.topology and alone.topology is not warm.topology
    assert again.step.memo is warm.step.memo and shared.memo(warm.topology)
    assert simulate(again.step.program).end_s == simulate(alone.step.program).end_s


def test_a_plan_that_cannot_fit_the_cluster_fails_before_the_cluster_is_built(monkeypatch):
    """32,768 GPUs take seconds to build: a plan whose sizes cannot match them is refused first."""
    import pytest

    from scalesim.app import caches as caches_module
    from scalesim.app.setup import prepare
    from scalesim.errors import InputError
    from scalesim.scenario import Scenario

    built = []
    monkeypatch.setattr(caches_module, "build_cluster", lambda *a, **k: built.append(a))
    scenario = Scenario.model_validate({
        "name": "bad plan", "cluster": {"node": "dgx-h100", "nodes": 4096,
                    "fabric": {"link": "ib-ndr", "nics_per_node": 8, "topology": "rail-optimized"}},
        "model": "llama3-70b", "training": {"precision": "bf16", "seq_len": 8192, "global_batch": 1024},
        "parallel": {"tp": 8, "pp": 4, "dp": 512}})
    with pytest.raises(InputError, match="dp x tp x pp x cp") as error:
        prepare(scenario)
    assert error.value.key == "parallel.dp" and "32768 GPUs" in str(error.value)
    assert built == []


def test_plans_of_a_command_share_its_model_and_its_sharded_layers():
    """A sweep's plans train the same model: built once per model and training keys, its layers then
    sharded once per tensor / context split (found by identity), with the very results of a fresh build."""
    scenario = Scenario.model_validate({**SCENARIO, "model": {"kind": "transformer", "layers": 4, "hidden": 512,
                                                              "heads": 8, "vocab": 32000},
                                        "parallel": {"dp": 4, "tp": 2}})
    shared = Caches()
    first = prepare(scenario, caches=shared)
    other_split = prepare(scenario.with_changes(parallel={"dp": 2, "tp": 4}), caches=shared)
    assert other_split.model is first.model
    again = prepare(scenario, caches=shared)
    assert again.step.stages[0].layers[1] is first.step.stages[0].layers[1]      # the same sharded block
    assert again.step.stages[0].order is first.step.stages[0].order
    eager = prepare(scenario.with_changes(training={"elementwise_kernels": "eager"}), caches=shared)
    assert eager.model != first.model and len(shared.models) == 2
    alone = prepare(scenario)
    assert alone.model is not first.model and alone.model == first.model
    assert alone.step.stages == again.step.stages
    assert simulate(again.step.program).end_s == simulate(alone.step.program).end_s
