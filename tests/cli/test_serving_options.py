"""`serve` and serving `compare`: a catalog folder is used as by the training commands, and the
training-only options of `compare` are refused, never silently ignored."""

import json

import pytest
from click.testing import CliRunner

from scalesim.cli import main

SERVING = """\
name: {name}
cluster: {{node: {{gpu: {gpu}, gpus: 1}}}}
model: llama3-8b
serving:
  tp: 1
  max_batch_tokens: 2048
  max_seqs: 32
  requests: {{rate_per_s: 1, count: 8, prompt_tokens: 256, output_tokens: 8, seed: 0}}
  slo: {{ttft_s: 1.0, tpot_s: 0.05}}
"""


def invoke(*args, env=None):
    result = CliRunner().invoke(main, list(args), env=env)
    assert "Traceback" not in result.output
    return result


def _catalog(tmp_path):
    folder = tmp_path / "my-catalog"
    folder.mkdir()
    (folder / "gpus.yaml").write_text("my-card: {base: rtx4090, memory_gb: 48}\n")
    return folder


def _scenario(tmp_path, gpu, name="s"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SERVING.format(name=name, gpu=gpu))
    return path


def test_serve_reads_a_gpu_from_a_catalog_folder(tmp_path):
    folder = _catalog(tmp_path)
    mine = invoke("serve", str(_scenario(tmp_path, "my-card")), "--json", "--no-search", "--no-plots",
                  "--catalog", str(folder))
    assert mine.exit_code == 0, mine.output
    stock = invoke("serve", str(_scenario(tmp_path, "rtx4090", "stock")), "--json", "--no-search", "--no-plots")
    mine, stock = json.loads(mine.stdout), json.loads(stock.stdout)
    assert mine["memory_capacity_bytes"] == 2 * stock["memory_capacity_bytes"]
    # the weights are the same; the 24 GiB more go to the KV cache
    assert mine["memory_breakdown_bytes"]["weights"] == stock["memory_breakdown_bytes"]["weights"]
    assert mine["kv_cache_tokens"] > stock["kv_cache_tokens"]


def test_serve_reads_scalesim_catalog_from_the_environment(tmp_path):
    folder = _catalog(tmp_path)
    result = invoke("serve", str(_scenario(tmp_path, "my-card")), "--json", "--no-search", "--no-plots",
                    env={"SCALESIM_CATALOG": str(folder)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gpu"] == "my-card"


def test_a_serving_comparison_reads_the_catalog_folder(tmp_path):
    folder = _catalog(tmp_path)
    result = invoke("compare", str(_scenario(tmp_path, "my-card", "a")), str(_scenario(tmp_path, "rtx4090", "b")),
                    "--json", "--no-plots", "--catalog", str(folder))
    assert result.exit_code == 0, result.output
    assert [r["gpu"] for r in json.loads(result.stdout)["table"]] == ["my-card", "rtx4090"]


@pytest.mark.parametrize("option", [["--report", "r.html"], ["--samples", "10"],
                                    ["--search"], ["--rank", "cost"], ["--allow-different-work"],
                                    ["--max-seconds", "60"], ["--exact"], ["--seed", "1"]])
def test_a_serving_comparison_refuses_what_only_training_comparisons_do(tmp_path, option):
    files = [str(_scenario(tmp_path, "rtx4090", n)) for n in ("a", "b")]
    result = invoke("compare", *files, "--no-plots", *option)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: option '{option[0]}'") and "training scenarios only" in result.output
    assert not (tmp_path / option[-1]).exists()


def test_serve_on_a_pipe_says_what_it_is_doing_on_stderr(tmp_path, monkeypatch):
    """Without a terminal the spinner draws nothing: serve was silent however long it took; now a
    line every interval (10 s; here shortened) on stderr, and stdout stays the JSON alone."""
    import functools

    import scalesim.cli.wiring as wiring
    from scalesim.app.heartbeat import heartbeat

    monkeypatch.setattr(wiring, "heartbeat", functools.partial(heartbeat, interval=0.001))
    path = _scenario(tmp_path, "rtx4090")
    result = invoke("serve", str(path), "--json", "--no-plots")
    assert result.exit_code == 0, result.output
    assert f"simulating the serving of {path}" in result.stderr and "elapsed" in result.stderr
    json.loads(result.stdout)


def test_a_serving_comparison_writes_its_table_as_csv(tmp_path):
    import csv

    table = tmp_path / "t.csv"
    files = [str(_scenario(tmp_path, gpu, n)) for gpu, n in (("rtx4090", "a"), ("h100-sxm", "b"))]
    result = invoke("compare", *files, "--no-plots", "--json", "--csv", str(table))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(table.open()))
    data = json.loads(result.stdout)["table"]
    assert [r["gpu"] for r in rows] == ["rtx4090", "h100-sxm"] and rows[0]["plan"] == "tp=1 pp=1 bf16"
    assert [float(r["max_rate_under_slo"]) for r in rows] == [d["max_rate_under_slo"] for d in data]
