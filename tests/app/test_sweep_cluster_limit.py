"""sweep --gpus beyond the cluster limit: the message is about GPUs, in GPUs (it read
"1,000,000 GPUs: 125,000 is above the limit of 4,096", a node count with a GPU limit's reason)."""

from pathlib import Path

from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_too_many_gpus_for_a_sweep_names_gpus_and_their_limit(tmp_path):
    result = CliRunner().invoke(main, ["sweep", str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "--gpus", "1000000",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "1,000,000 GPUs" in result.output and "32,768" in result.output
    assert "125,000 is above" not in result.output

