"""collective's errors name the option the user typed (--algo), not the plan key it sets (algo)."""

import pytest
from click.testing import CliRunner

from scalesim.cli import main


@pytest.mark.parametrize("args, option", [
    (["--algo", "spiral"], "--algo"),
    (["--topology", "rtx4090-pcie-8", "--algo", "nvls"], "--algo"),      # no NVSwitch: not allowed here
    (["--op", "send_recv", "--algo", "tree"], "--algo"),
    (["--protocol", "smoke"], "--protocol"),
    (["--gpus", "99"], "--gpus"),
    (["--nodes", "2"], "--fabric"),
    (["--nodes", "2", "--fabric", "ib-nope"], "--fabric"),
    (["--sizes", "0"], "--sizes"),
    (["--sizes", "8:1e400"], "--sizes"),        # fuzz15: an infinite range's doubling never ended (a hang)
])
def test_a_bad_option_is_named_as_typed_and_exits_2(args, option):
    result = CliRunner().invoke(main, ["collective", "--topology", "dgx-h100", "--sizes", "1M", *args])
    assert result.exit_code == 2, result.output
    assert f"option '{option}'" in result.output, result.output
    bare = option.removeprefix("--")
    assert f"'{bare}'" not in result.output.replace(f"'{option}'", ""), result.output
