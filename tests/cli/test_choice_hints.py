"""A mistyped choice option names the closest choice, as a mistyped catalog name does (ux15b):
`collective --op allreduce` suggests all_reduce, on every command's choice options."""

import re
from pathlib import Path

from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _error(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2, result.output
    return result.output


def test_a_mistyped_choice_suggests_the_closest_one():
    assert "Did you mean 'all_reduce'?" in _error("collective", "--topology", "dgx-h100", "--op", "allreduce")
    assert "Did you mean 'multi_gpu'?" in _error("validate", "--only", "multigpu")
    assert "Did you mean 'time'?" in _error("compare", str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "--rank", "tme")


def test_nothing_close_keeps_clicks_own_message():
    out = _error("compare", str(ROOT / "scenarios" / "8x4090-ddp.yaml"), "--rank", "money")
    assert "is not one of 'time', 'cost'" in out and "Did you mean" not in out


def test_every_choice_option_of_the_cli_uses_the_hinting_choice():
    files = list((ROOT / "scalesim" / "cli").glob("*.py"))
    assert len(files) > 3
    assert [p.name for p in files if re.search(r"click\.Choice\(", p.read_text())] == []


def test_the_hint_ignores_case_but_the_choice_still_does_not():
    """`--op ALL_REDUCE` is still refused (click matches choices case-sensitively), and the hint
    names the choice as it is spelled."""
    out = _error("collective", "--topology", "dgx-h100", "--op", "ALL_REDUCE")
    assert "Did you mean 'all_reduce'?" in out and "'ALL_REDUCE'" in out
