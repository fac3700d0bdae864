"""Serving a mixture-of-experts model is refused with one message (exit 2), never a traceback."""

import yaml
from click.testing import CliRunner

from scalesim.cli import main


def test_serving_a_moe_model_exits_2_naming_the_model_key(tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump({
        "name": "8x H100, Mixtral", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "mixtral-8x7b",
        "serving": {"tp": 4, "requests": {"rate_per_s": 1, "count": 8}}}))
    result = CliRunner().invoke(main, ["serve", str(path), "--no-plots", "--rates", "1"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert str(path) in result.output and "'model'" in result.output
    assert "mixture-of-experts" in result.output and "dense" in result.output
