"""sweep --gpus beyond the cluster limit: the message is about GPUs, in GPUs (it read
"1,000,000 GPUs: 125,000 is above the limit of 4,096", a node count with a GPU limit's reason)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.errors import InputError
from scalesim.limits import MAX_NODES, check_cluster_size

ROOT = Path(__file__).resolve().parents[2]


def test_too_many_gpus_for_a_sweep_names_gpus_and_their_limit(tmp_path):
    result = CliRunner().invoke(main, ["sweep", str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "--gpus", "1000000",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "1,000,000 GPUs" in result.output and "32,768" in result.output
    assert "125,000 is above" not in result.output


def test_too_many_one_gpu_nodes_says_nodes():
    with pytest.raises(InputError) as err:
        check_cluster_size(MAX_NODES + 1, 1)
    assert err.value.key == "cluster.nodes"
    assert f"{MAX_NODES + 1:,} nodes is above the limit of {MAX_NODES:,} nodes" in str(err.value)
