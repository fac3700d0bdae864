"""run's table: MFU of an adapter fine-tune counts 6 x N FLOPs per token (the contract's) where the
run executes about 4 x N; the row says so, so that it is not read as the GPU's real utilisation."""

from pathlib import Path

import yaml
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def mfu_row(path) -> str:
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots", "--no-scaling"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    i = next(k for k, line in enumerate(lines) if "model TFLOP/s per GPU" in line)
    return " ".join(lines[i:i + 3])


def test_the_mfu_of_a_lora_run_says_it_counts_6n_and_to_compare_tokens_per_s(tmp_path):
    lora = ROOT / "scenarios" / "1x4090-llama2-7b-lora.yaml"
    assert "6 x parameters" in mfu_row(lora) and "tokens/s" in mfu_row(lora)
    data = yaml.safe_load(lora.read_text())
    data["training"].update(finetune="none", optimizer="sgd")
    data["model"] = "llama3.2-1b"
    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump(data))
    assert "6 x parameters" not in mfu_row(full)
