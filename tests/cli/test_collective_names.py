"""collective --algo / --protocol take NCCL's own spellings (NCCL_ALGO=Ring, NCCL_PROTO=LL128,
Simple) as well as lower case: the same rows either way."""

import json

from click.testing import CliRunner

from scalesim.cli import main


def _rows(*args):
    result = CliRunner().invoke(main, ["collective", "--topology", "dgx-h100", "--sizes", "1M,64M", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_nccl_spellings_give_the_same_rows_as_lower_case():
    assert _rows("--algo", "Ring", "--protocol", "LL128") == _rows("--algo", "ring", "--protocol", "ll128")
    assert _rows("--protocol", "Simple") == _rows("--protocol", "simple")
