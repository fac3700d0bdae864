"""calibrate with an empty measurement file: it says the file is empty and what it takes (it asked
for --op, and with --op for nccl-tests' '# Rank' lines)."""

import pytest
from click.testing import CliRunner

from scalesim.cli import main


@pytest.mark.parametrize("name, extra", [("log.txt", []), ("log.txt", ["--op", "all_reduce"]),
                                         ("gemm.csv", ["--gpu", "h100-sxm"])])
def test_an_empty_measurement_file_is_named_as_empty(tmp_path, name, extra):
    path = tmp_path / name
    path.write_text("\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(tmp_path / "out"), *extra])
    assert result.exit_code == 2
    assert str(path) in result.output and "empty" in result.output and "nccl-tests" in result.output
