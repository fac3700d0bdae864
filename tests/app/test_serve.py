"""`scalesim serve`: latency physics at the request level, the KV cache's size, the contract's exit codes."""

import json

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.app.serve import IterationTimer, prepare_serving, serve
from scalesim.serving.spec import ServingScenario

SMALL = {
    "name": "1x H100, Llama 3 8B, small load",
    "cluster": {"node": "dgx-h100", "gpus": 1},
    "model": "llama3-8b",
    "serving": {"tp": 1, "weights": "bf16", "max_batch_tokens": 2048, "max_seqs": 64,
                "requests": {"rate_per_s": 1.0, "count": 24, "prompt_tokens": 256, "output_tokens": 16, "seed": 3},
                "slo": {"ttft_s": 0.5, "tpot_s": 0.05}},
}


def scenario(**serving) -> ServingScenario:
    data = json.loads(json.dumps(SMALL))
    requests = serving.pop("requests", {})
    data["serving"].update(serving)
    data["serving"]["requests"].update(requests)
    return ServingScenario.model_validate(data)


def test_at_a_rate_near_zero_ttft_is_one_prefill_and_tpot_one_decode_step():
    sc = scenario(requests={"rate_per_s": 0.001, "count": 5})
    out = serve(sc, search=False)
    timer = IterationTimer(prepare_serving(sc))
    prefill = timer.of_entries([(256, 256, True)])
    assert out["ttft_s"]["p50"] == pytest.approx(prefill, rel=1e-9)
    assert out["ttft_s"]["p99"] == pytest.approx(prefill, rel=1e-9)
    # The 15 decode steps read a context growing from 257 to 271 tokens.
    first, last = timer.of_entries([(1, 257, True)]), timer.of_entries([(1, 271, True)])
    assert first <= out["tpot_s"]["p50"] <= last
    assert out["tpot_s"]["p50"] == pytest.approx(first, rel=1e-3)


def test_an_overlapped_host_costs_an_iteration_only_what_exceeds_the_gpu_time():
    """With the overlap scheduler the host's work runs beside the GPU's next iteration: a GPU-bound
    iteration takes its GPU time alone, a host-bound one the host time, never their sum."""
    prefill, step = [(256, 256, True)], [(1, 257, True)]
    serial = IterationTimer(prepare_serving(scenario(host_overhead_ms=0.5)))
    overlapped = IterationTimer(prepare_serving(scenario(host_overhead_ms=0.5, overlap_scheduler=True)))
    gpu_only = IterationTimer(prepare_serving(scenario(host_overhead_ms=0.0)))
    for entries in (prefill, step):
        assert overlapped.of_entries(entries) == pytest.approx(gpu_only.of_entries(entries), rel=1e-12)
        assert serial.of_entries(entries) == pytest.approx(gpu_only.of_entries(entries) + 0.5e-3, rel=1e-12)
    slow_host = IterationTimer(prepare_serving(scenario(host_overhead_ms=500.0, overlap_scheduler=True)))
    assert slow_host.of_entries(step) == pytest.approx(0.5, rel=1e-12)


def test_latency_never_falls_as_the_rate_rises():
    sc = scenario(requests={"count": 40, "prompt_tokens": {"mean": 512, "dist": "lognormal", "max": 2048},
                            "output_tokens": {"mean": 64, "dist": "exponential", "max": 256}})
    out = serve(sc, rates=[0.5, 4, 16, 64, 256])
    rows = out["sweep"]
    assert [r["rate_per_s"] for r in rows] == [0.5, 4, 16, 64, 256]
    for key in ("ttft_s", "e2e_latency_s"):
        for q in ("p50", "p99"):
            values = [r[key][q] for r in rows]
            assert values == sorted(values), (key, q, values)
    # Throughput follows the offered load until the GPU saturates, and never falls.
    tokens = [r["output_tokens_per_s"] for r in rows]
    assert tokens == sorted(tokens)


def test_max_rate_under_slo_is_the_highest_rate_that_meets_it():
    out = serve(scenario(requests={"count": 200}), rates=[1, 1000, 10])
    met = [r["rate_per_s"] for r in out["sweep"] if r["meets_slo"]]
    assert out["max_rate_under_slo"] == max(met) and 1000 not in met


def test_kv_capacity_is_free_memory_over_bytes_per_token():
    out = serve(scenario(requests={"count": 4}), search=False)
    mem = out["memory_breakdown_bytes"]
    assert out["memory_per_gpu_bytes"] == sum(mem.values()) <= out["memory_capacity_bytes"]
    free = out["memory_capacity_bytes"] * 0.9 - mem["weights"] - mem["activations"] - mem["framework"]
    per_token = 2 * 32 * 8 * 128 * 2            # Llama 3 8B: K and V, 32 layers, 8 KV heads x 128, bf16
    assert mem["kv_cache"] == out["kv_cache_tokens"] * per_token
    assert free - 16 * per_token < mem["kv_cache"] <= free           # whole 16-token blocks
    assert 0 < out["kv_cache_peak_fraction"] <= 1


def test_fp8_kv_cache_holds_twice_the_tokens_of_bf16():
    base = serve(scenario(requests={"count": 2}), search=False)
    fp8 = serve(scenario(kv_cache="fp8", requests={"count": 2}), search=False)
    assert fp8["kv_cache_tokens"] == pytest.approx(2 * base["kv_cache_tokens"], abs=32)


def test_more_replicas_serve_a_heavy_load_with_lower_latency():
    load = {"rate_per_s": 40, "count": 60}
    one = serve(scenario(requests=load), search=False)
    data = json.loads(json.dumps(SMALL))
    data["cluster"]["gpus"] = 2
    data["serving"]["requests"].update(load)
    two = serve(ServingScenario.model_validate(data), search=False)
    assert two["replicas"] == 2
    assert two["e2e_latency_s"]["p50"] < one["e2e_latency_s"]["p50"]


# ------------------------------------------------------------------------- the command

def write(tmp_path, data) -> str:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def cli(*args):
    result = CliRunner().invoke(main, ["serve", *args])
    assert "Traceback" not in result.output
    return result


def test_the_same_seed_gives_identical_json(tmp_path):
    path = write(tmp_path, SMALL)
    a = cli(path, "--json", "--no-plots", "--rates", "1,8")
    b = cli(path, "--json", "--no-plots", "--rates", "1,8")
    assert a.exit_code == 0 and a.output == b.output
    keys = json.loads(a.stdout)
    for key in ("ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "requests_per_s", "kv_cache_tokens",
                "kv_cache_peak_fraction", "preemptions", "max_rate_under_slo", "cost_per_million_tokens_usd"):
        assert key in keys
    assert set(keys["ttft_s"]) == {"p50", "p90", "p99"}
    assert set(keys["cost_per_million_tokens_usd"]) == {"cloud", "owned"}
    # A million tokens at the simulated rate on all the scenario's GPUs, in GPU-hours.
    assert keys["gpu_hours_per_million_tokens"] * keys["output_tokens_per_s"] * 3600 == \
        pytest.approx(keys["gpus"] * 1e6)
    other = json.loads(json.dumps(SMALL))
    other["serving"]["requests"].update(seed=4, prompt_tokens={"mean": 256, "dist": "lognormal"})
    assert cli(write(tmp_path, other), "--json", "--no-plots", "--no-search").output != a.output


@pytest.mark.parametrize("change, needles", [
    ({"tpp": 2}, ["serving.tpp", "Did you mean 'tp'"]),
    ({"weights": "int3"}, ["serving.weights", "int4"]),
    ({"tp": 3}, ["serving.tp", "allowed"]),
    ({"requests": {"rate_per_s": 1, "concurrency": 4}}, ["serving.requests", "exactly one of rate_per_s"]),
    ({"requests": {"rate_per_s": 1, "prompt_tokens": {"mean": 10, "dist": "gauss"}}},
     ["serving.requests.prompt_tokens.dist", "lognormal"]),
    ({"max_seqs": 4096, "max_batch_tokens": 1024}, ["serving", "max_seqs"]),
])
def test_bad_serving_keys_exit_2_naming_the_key_and_the_fix(tmp_path, change, needles):
    data = json.loads(json.dumps(SMALL))
    data["serving"].update(change)
    path = write(tmp_path, data)
    result = cli(path, "--no-plots")
    assert result.exit_code == 2, result.output
    assert path in result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.mark.parametrize("prompt, output, refused", [(3000, 16, True), (1000, 100, True), (1000, 24, False)])
def test_a_request_longer_than_a_learned_position_table_exits_2(tmp_path, prompt, output, refused):
    """fuzz15: GPT-2 (1,024 learned positions) served 3,000-token prompts at exit 0; training refuses the same
    length (models/zoo.py), and vLLM the request. Rotary models keep no hard limit."""
    data = json.loads(json.dumps(SMALL))
    data["model"] = "gpt2-350m"
    data["serving"]["requests"].update(count=8, prompt_tokens=prompt, output_tokens=output)
    path = write(tmp_path, data)
    result = cli(path, "--json", "--no-plots", "--no-search")
    if refused:
        assert result.exit_code == 2 and path in result.output and "serving.requests" in result.output
        assert f"{prompt + output:,} tokens" in result.output and "1024 learned position" in result.output
    else:
        assert result.exit_code == 0, result.output


def test_bad_rates_and_training_scenarios_exit_2(tmp_path):
    assert cli(write(tmp_path, SMALL), "--rates", "1,fast").exit_code == 2
    result = cli("scenarios/8x4090-ddp.yaml")
    assert result.exit_code == 2 and "serving" in result.output
    result = CliRunner().invoke(main, ["run", "scenarios/serve-1x4090-llama3-8b.yaml", "--no-plots"])
    assert result.exit_code == 2 and "scalesim serve" in result.output


def test_weights_that_do_not_fit_at_the_chosen_tp_exit_3(tmp_path):
    data = json.loads(json.dumps(SMALL))
    data["cluster"] = {"node": "rtx4090-pcie-4", "gpus": 1}
    data["model"] = "llama3-70b"
    result = cli(write(tmp_path, data), "--json", "--no-plots")
    assert result.exit_code == 3, result.output
    out = json.loads(result.stdout)
    assert out["fits"] is False and "serving.tp" in out["reason"] and out["ttft_s"] is None


def four_4090s(p2p: bool) -> dict:
    return {"name": f"4x 4090, p2p {p2p}", "gpu": "rtx4090", "gpus": 4, "p2p": p2p,
            "host": {"sockets": 1, "memory": "ddr4-3200-8ch"}, "pcie": {"link": "pcie-gen4", "switches": 0}}


def test_tensor_parallel_steps_pay_for_their_all_reduces_and_p2p_is_never_slower():
    def step(tp: int, p2p: bool, tokens: int) -> float:
        data = json.loads(json.dumps(SMALL))
        data["cluster"] = {"node": four_4090s(p2p), "gpus": tp}
        data["serving"]["tp"] = tp
        timer = IterationTimer(prepare_serving(ServingScenario.model_validate(data)))
        return timer.of_entries([(tokens, tokens, True)])

    for tokens in (1, 512):
        # Half the weights per GPU, but 64 all-reduces through host memory: never the ideal half.
        assert step(2, False, tokens) > step(1, False, tokens) / 2
        assert step(2, True, tokens) <= step(2, False, tokens)
    assert step(1, True, 512) == step(1, False, 512)            # one GPU sends nothing


def test_the_assumptions_give_every_factor_of_the_gemm_rate_serving_uses():
    # a power-limited part's clock (catalog training_clock_fraction: H100 0.92, MI300X 0.57) scales the
    # GEMM rate serving predicts; the table a reader checks must show it beside the GEMM efficiency
    from scalesim.app.serve import assumptions
    from scalesim.costs.compute import achieved_peak_flop_per_s
    for node in ("dgx-h100", "mi300x-8"):
        data = json.loads(json.dumps(SMALL))
        data["cluster"]["node"] = node
        setup = prepare_serving(ServingScenario.model_validate(data))
        rows = {r["input"]: r["value"] for r in assumptions(setup, IterationTimer(setup))}
        factors = [v for k, v in rows.items() if k.startswith(("GEMM efficiency", "sustained clock"))]
        assert setup.gpu.training_clock_fraction < 1.0 and len(factors) == 2
        assert factors[0] * factors[1] * setup.gpu.bf16_flop_per_s == pytest.approx(
            achieved_peak_flop_per_s(setup.gpu, "bf16"))


def test_the_max_rate_found_meets_the_slo_with_all_the_scenarios_requests():
    """The search probes with the first 400 requests; near saturation a queue that grows slowly can
    miss the SLO over the whole load. The rate reported must be one whose row (all the requests)
    says met, as the table beside it shows."""
    from scalesim.serving.spec import load_serving_scenario

    sc, file = load_serving_scenario("scenarios/serve-2x4090-llama3-8b.yaml")
    assert sc.serving.requests.count > 400
    out = serve(sc, file)
    best = out["max_rate_under_slo"]
    row = next(r for r in out["sweep"] if r["rate_per_s"] == best)
    assert row["meets_slo"] and row["requests"] == sc.serving.requests.count
    assert row["tpot_s"]["p99"] <= sc.serving.slo.tpot_s and row["ttft_s"]["p99"] <= sc.serving.slo.ttft_s
    # Every rate above it run with all the requests missed (the search did not stop short).
    above = [r for r in out["sweep"] if r["rate_per_s"] > best and r["requests"] == sc.serving.requests.count]
    assert all(not r["meets_slo"] for r in above)


def test_a_rate_given_twice_is_simulated_once():
    from scalesim.cli.serving_commands import rate_list

    assert rate_list("2,2,1") == [1.0, 2.0] and rate_list("4, 1,4.0") == [1.0, 4.0]


def test_more_gpus_than_the_node_holds_names_the_nodes_that_would_as_run_does():
    # ux15b: serve said only "allowed: 1..8"; run names the cluster.nodes that hold them
    from scalesim.errors import InputError
    data = json.loads(json.dumps(SMALL))
    data["cluster"]["gpus"] = 20
    with pytest.raises(InputError) as exc:
        prepare_serving(ServingScenario.model_validate(data))
    assert exc.value.key == "cluster.gpus"
    assert "cluster.nodes: 3 holds 24" in str(exc.value) and "1..8" in str(exc.value)
