"""run's table says why a run has no owned cost (a GPU the catalog has no price for), and which key sets it."""

import yaml
from click.testing import CliRunner

from scalesim.cli import main


def b200(tmp_path, **pricing):
    path = tmp_path / "b200.yaml"
    path.write_text(yaml.safe_dump({
        "name": "1x B200", "cluster": {"node": "hgx-b200", "gpus": 1}, "model": "gpt2-350m",
        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "micro_batch": 8, "tokens": 1e9},
        **({"pricing": pricing} if pricing else {})}))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if "cost to train (owned)" in line)


def test_a_gpu_without_a_list_price_says_owned_cost_is_na_and_names_the_key(tmp_path):
    assert "n/a" in b200(tmp_path) and "pricing.ownership.gpu_usd" in b200(tmp_path)
    priced = b200(tmp_path, ownership={"gpu_usd": 40000})
    assert "n/a" not in priced and "purchase" in priced


def test_a_scenario_without_a_budget_says_which_keys_give_time_cost_and_energy(tmp_path):
    data = yaml.safe_load(open("scenarios/8x4090-ddp.yaml"))
    del data["training"]["tokens"]
    path = tmp_path / "nobudget.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 0, result.output
    assert "not computed" in result.output and "training.tokens" in result.output
    assert "time to train" not in result.output


def test_serving_on_a_gpu_without_a_price_names_the_key_for_the_owned_cost():
    from scalesim.report.serving import serving_table

    r = {"scenario": "b200", "gpus": 8, "gpu": "b200", "replicas": 1, "plan": {"tp": 8, "pp": 1},
         "memory_breakdown_bytes": {"weights": 1.0}, "memory_capacity_bytes": 2.0, "fits": True,
         "kv_cache_tokens": 10, "rate_per_s": 1.0, "requests": 10, "ttft_s": None, "tpot_s": None,
         "e2e_latency_s": None, "output_tokens_per_s": 1.0, "requests_per_s": 1.0, "preemptions": 0,
         "slo": {"ttft_s": 1.0, "tpot_s": 0.1}, "cost_per_million_tokens_usd": {"cloud": 2.0, "owned": None}}
    from rich.console import Console
    console = Console(width=300, record=True)
    console.print(serving_table(r))
    assert "pricing.ownership.gpu_usd" in console.export_text()


def _serving_text(cost: dict, tokens_per_s: float = 1.0) -> str:
    from rich.console import Console

    from scalesim.report.serving import serving_table

    r = {"scenario": "rubin", "gpus": 1, "gpu": "rubin", "replicas": 1, "plan": {"tp": 1, "pp": 1},
         "memory_breakdown_bytes": {"weights": 1.0}, "memory_capacity_bytes": 2.0, "fits": True,
         "kv_cache_tokens": 10, "rate_per_s": 1.0, "requests": 10, "ttft_s": None, "tpot_s": None,
         "e2e_latency_s": None, "output_tokens_per_s": tokens_per_s, "requests_per_s": 1.0, "preemptions": 0,
         "slo": {"ttft_s": 1.0, "tpot_s": 0.1}, "cost_per_million_tokens_usd": cost}
    console = Console(width=300, record=True)
    console.print(serving_table(r))
    return console.export_text()


def test_serving_on_a_gpu_with_neither_price_names_both_keys():
    # rubin has neither a cloud nor a list price: both halves say n/a and name their key
    text = _serving_text({"cloud": None, "owned": None})
    assert "pricing.gpu_hour_usd" in text and "pricing.ownership.gpu_usd" in text
    # no throughput (the model does not fit): nothing to price, so no key is blamed
    idle = _serving_text({"cloud": None, "owned": None}, tokens_per_s=0.0)
    assert "pricing.gpu_hour_usd" not in idle and "pricing.ownership.gpu_usd" not in idle


def test_a_gpu_without_a_cloud_price_says_cloud_cost_is_na_and_names_the_key(tmp_path):
    path = tmp_path / "rubin.yaml"
    path.write_text(yaml.safe_dump({
        "name": "1x Rubin", "cluster": {"node": "vera-rubin-nvl72", "gpus": 1}, "model": "gpt2-350m",
        "training": {"precision": "bf16", "seq_len": 1024, "global_batch": 8, "micro_batch": 8, "tokens": 1e9}}))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "cost to train (cloud)" in line)
    assert "n/a" in row and "pricing.gpu_hour_usd" in row
