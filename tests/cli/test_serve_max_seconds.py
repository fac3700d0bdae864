"""serve --max-seconds: a load estimated beyond the 10 s answer budget runs when the option allows
it (the refusal names the option and the seconds), and a simulation past the limit stops, exit 2."""

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.limits import answer_budget, check_serving_size


def load(tmp_path, count: int, output_tokens: int = 256) -> str:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump({
        "name": "1x H100, Llama 3 8B", "cluster": {"node": "dgx-h100", "gpus": 1}, "model": "llama3-8b",
        "serving": {"tp": 1, "requests": {"rate_per_s": 4, "count": count, "prompt_tokens": 256,
                                          "output_tokens": output_tokens, "seed": 0}}}))
    return str(path)


def serve(*args):
    result = CliRunner().invoke(main, ["serve", *args, "--no-plots"])
    assert "Traceback" not in result.output
    return result


def test_a_load_over_the_budget_names_max_seconds_and_passes_the_estimate_with_it(tmp_path):
    path = load(tmp_path, 12_000)
    refused = serve(path, "--rates", "4")
    assert refused.exit_code == 2 and "--max-seconds" in refused.output
    seconds = int(refused.output.split("--max-seconds ")[1].split()[0])
    assert 10 < seconds < 60
    size = dict(count=12_000, prompt_tokens=256, output_tokens=256, max_batch_tokens=8192, rates=1, search=False,
                search_requests=400, search_probes=0)
    with answer_budget(seconds):
        check_serving_size(**size)                       # allowed: no InputError
    with answer_budget(seconds - 1), pytest.raises(InputError):
        check_serving_size(**size)


def test_a_simulation_past_the_wall_time_limit_stops_with_exit_2(tmp_path):
    short = serve(load(tmp_path, 2_000, 64), "--rates", "4", "--max-seconds", "0.01")
    assert short.exit_code == 2 and "--max-seconds" in short.output and "longer than" in short.output


@pytest.mark.parametrize("command", ["serve", "run"])
def test_an_infinite_max_seconds_means_no_limit_not_a_traceback(tmp_path, command):
    with answer_budget(float("inf")):
        check_serving_size(count=12_000, prompt_tokens=256, output_tokens=256, max_batch_tokens=8192, rates=1,
                           search=False, search_requests=400, search_probes=0)      # allowed: no OverflowError
    args = ["--rates", "4"] if command == "serve" else []
    result = CliRunner().invoke(main, [command, load(tmp_path, 200, 16) if command == "serve" else
                                       "scenarios/8x4090-ddp.yaml", *args, "--no-plots", "--max-seconds", "inf"])
    assert "Traceback" not in result.output and not isinstance(result.exception, OverflowError)
    assert result.exit_code == 0, result.output
