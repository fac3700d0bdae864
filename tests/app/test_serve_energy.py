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
    gpu, host = builtin_catalog().gpu("h100-sxm"), HOST_POWER_W_NVSWITCH   # one GPU of a DGX H100 node
    assert gpu.idle_w + host < watts < gpu.tdp_w + host
    assert energy["facility"] == pytest.approx(energy["it"] * 1.58)   # the default PUE
