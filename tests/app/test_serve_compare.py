"""`scalesim compare` over serving scenarios: the same work, each design at its best rate, a Pareto front."""

import json

import yaml
from click.testing import CliRunner

from scalesim.cli import main

SMALL = {
    "name": "1x H100, Llama 3 8B, small load",
    "cluster": {"node": "dgx-h100", "gpus": 1},
    "model": "llama3-8b",
    "serving": {"tp": 1, "max_batch_tokens": 2048, "max_seqs": 64,
                "requests": {"rate_per_s": 1.0, "count": 24, "prompt_tokens": 256, "output_tokens": 16, "seed": 3},
                "slo": {"ttft_s": 0.5, "tpot_s": 0.05}},
}


def write(tmp_path, filename, **changes):
    data = json.loads(json.dumps(SMALL))
    for section, values in changes.items():
        if isinstance(data.get(section), dict) and isinstance(values, dict):
            data[section].update(values)
        else:
            data[section] = values
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_two_designs_side_by_side_with_a_pareto_front(tmp_path):
    one = write(tmp_path, "one.yaml", name="one H100")
    two = write(tmp_path, "two.yaml", name="two H100", cluster={"node": "dgx-h100", "gpus": 2})
    result = CliRunner().invoke(main, ["compare", one, two, "--json", "--no-plots"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["scenario"]: r for r in data["table"]}
    # Two replicas of the same GPU sustain at least the rate one does under the same SLO.
    assert rows["two H100"]["max_rate_under_slo"] >= rows["one H100"]["max_rate_under_slo"]
    assert data["pareto_front"] and {p["scenario"] for p in data["pareto_front"]} <= set(rows)


def test_designs_with_different_work_or_kinds_exit_2(tmp_path):
    one = write(tmp_path, "one.yaml")
    longer = write(tmp_path, "longer.yaml", serving={"requests": {**SMALL["serving"]["requests"], "output_tokens": 64}})
    result = CliRunner().invoke(main, ["compare", one, longer, "--no-plots"])
    assert result.exit_code == 2 and "serving.requests.output_tokens" in result.output
    result = CliRunner().invoke(main, ["compare", one, "scenarios/8x4090-ddp.yaml", "--no-plots"])
    assert result.exit_code == 2 and "training and serving" in result.output


def test_a_differing_slo_is_shown_as_the_file_writes_it(tmp_path):
    one = write(tmp_path, "one.yaml")
    looser = write(tmp_path, "looser.yaml", serving={"slo": {"ttft_s": 0.5, "tpot_s": 0.1}})
    result = CliRunner().invoke(main, ["compare", one, looser, "--no-plots"])
    assert result.exit_code == 2 and "serving.slo" in result.output
    assert "tpot_s: 0.05" in result.output and "tpot_s: 0.1" in result.output
    assert "SloSpec(" not in result.output
