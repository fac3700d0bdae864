"""Offloaded weights (ZeRO-Infinity / FSDP CPUOffload): each layer is copied in before every use,
on the topology's host route, so host memory and PCIe bandwidth decide what it costs."""

import pytest

from scalesim.costs.finetune import stored_weight_bytes
from scalesim.parallel.builder import build_program
from scalesim.program import CollectiveTask
from scalesim.app.setup import prepare, simulate_setup
from scalesim.scenario import Scenario


def scenario(gpus=1, zero=0, memory="ddr4-3200-8ch", checkpointing="none", finetune="qlora") -> Scenario:
    node = {"name": "ws", "gpu": "rtx4090", "gpus": 4, "p2p": False,
            "host": {"sockets": 1, "memory": memory}, "pcie": {"link": "pcie-gen4", "switches": 0}}
    return Scenario.model_validate({
        "name": "offload", "cluster": {"node": node, "gpus": gpus}, "model": "llama3.2-1b",
        "training": {"precision": "bf16", "seq_len": 512, "global_batch": 4 * gpus, "micro_batch": 2,
                     "finetune": finetune, "activation_checkpointing": checkpointing},
        "parallel": {"zero": zero, "offload_params": True}})


def fetches(setup, rank=0):
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=False)
    return [t for t in program.tasks[rank] if isinstance(t, CollectiveTask) and t.key.startswith("offload/fetch/")]


@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_every_layer_is_fetched_before_each_forward_and_backward(checkpointing):
    setup = prepare(scenario(checkpointing=checkpointing))
    layers = len(setup.model.layers)
    passes = 2 * setup.plan.micro_batches        # recompute reuses the backward's copy
    tasks = fetches(setup)
    assert len(tasks) == layers * passes
    per_pass = sum(stored_weight_bytes(layer, "bf16", setup.plan.finetune) for layer in setup.model.layers)
    adapters = sum(t.plan.size_bytes for t in tasks) - passes * per_pass
    assert 0 <= adapters < 0.05 * passes * per_pass     # plus the (small) adapters themselves


def test_with_zero3_each_rank_fetches_its_shard():
    one, two = prepare(scenario(gpus=1)), prepare(scenario(gpus=2, zero=3))
    assert sum(t.plan.size_bytes for t in fetches(two)) == pytest.approx(sum(t.plan.size_bytes for t in fetches(one)) / 2)


def test_copies_are_flows_from_host_memory_to_the_gpu():
    setup = prepare(scenario(gpus=2))
    for rank in (0, 1):
        flow = fetches(setup, rank)[0].plan.phases[0].flows[0]
        assert flow.links == setup.topology.host_route(rank, False)


def test_more_host_memory_bandwidth_is_never_slower():
    # Four GPUs pulling weights through one socket's memory: contention a faster memory relieves.
    slow = simulate_setup(prepare(scenario(gpus=4, zero=3))).end_s
    fast = simulate_setup(prepare(scenario(gpus=4, zero=3, memory="ddr5-4800-12ch"))).end_s
    assert fast <= slow
