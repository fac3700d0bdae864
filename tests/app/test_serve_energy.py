"""serve's energy per million output tokens: the cluster's draw over the hour of serving that makes
them, between all GPUs idle and all at TDP (plus the hosts), and x PUE at the facility."""

import pytest

from scalesim.costs.economics import HOST_POWER_W_NVSWITCH
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.app.serve import serve
from scalesim.serving.spec import ServingScenario


def test_energy_per_million_tokens_is_the_clusters_draw_over_the_time_they_take():
    scenario = ServingScenario.model_validate({
        "name": "1x H100, Llama 3 8B", "cluster": {"node": "dgx-h100", "gpus": 1}, "model": "llama3-8b",
        "serving": {"tp": 1, "max_batch_tokens": 2048, "max_seqs": 64,
                    "requests": {"rate_per_s": 2.0, "count": 40, "prompt_tokens": 256, "output_tokens": 32, "seed": 1},
                    "slo": {"ttft_s": 0.5, "tpot_s": 0.05}}})
    r = serve(scenario, search=False)
    energy = r["energy_kwh_per_million_tokens"]
    seconds = 1e6 / r["output_tokens_per_s"]                  # to make a million tokens
    watts = energy["it"] * 3.6e6 / seconds                   # the average draw, GPUs and hosts
    # one GPU of a DGX H100 node: its share of the host, an eighth, as training charges it (cost_basis)
    gpu, host = builtin_catalog().gpu("h100-sxm"), HOST_POWER_W_NVSWITCH / 8
    assert gpu.idle_w + host < watts < gpu.tdp_w + host
    assert energy["facility"] == pytest.approx(energy["it"] * 1.58)   # the default PUE


def test_one_gpu_of_a_node_pays_per_token_what_the_whole_node_pays_at_the_same_rate_per_gpu():
    """As training (app/procurement.py nodes_charged): a run on part of a node is charged its GPUs' share of
    the node's server and host draw, so at the same tokens per GPU and busy fraction, one GPU of an 8-GPU
    node and the whole node cost and draw the same per token."""
    from types import SimpleNamespace

    from scalesim.app.serve_costs import per_million_tokens

    def setup(gpus):
        scenario = ServingScenario.model_validate({
            "name": "share", "cluster": {"node": "dgx-h100", "gpus": gpus}, "model": "llama3-8b",
            "serving": {"tp": 1, "requests": {"rate_per_s": 1.0, "count": 4, "prompt_tokens": 64,
                                              "output_tokens": 8}}})
        return SimpleNamespace(scenario=scenario, gpu=builtin_catalog().gpu("h100-sxm"), gpus=gpus, file=None,
                               catalog=None)

    one_cost, one_energy = per_million_tokens(setup(1), 1000.0, 0.5)
    node_cost, node_energy = per_million_tokens(setup(8), 8000.0, 0.5)
    assert one_cost["owned"] == pytest.approx(node_cost["owned"])
    assert one_energy["it"] == pytest.approx(node_energy["it"])
