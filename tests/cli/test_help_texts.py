"""What a new user reads first: every command's --help, as click prints it."""

import pytest
from click.testing import CliRunner

from scalesim.cli import main

COMMANDS = [[], ["run"], ["compare"], ["sweep"], ["collective"], ["validate"], ["serve"], ["calibrate"],
            ["hardware"], ["topologies"], ["topology", "show"], ["models"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "scalesim")
def test_help_prints_percent_signs_once(command):
    """Click prints help text as written (no %-formatting), so '%%' reaches the user doubled."""
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0
    assert "%%" not in result.output


@pytest.mark.parametrize("command, units", [(["calibrate"], ["TFLOP/s", "GB/s"]), (["collective"], ["bytes"]),
                                            (["serve"], ["requests/s"])])
def test_help_says_the_unit_of_what_the_user_types(command, units):
    """calibrate's CSV value and collective's --sizes: a number without its unit is a guess."""
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=120)
    text = " ".join(result.output.split())
    assert all(u in text for u in units), (units, text)


def test_serve_help_says_how_the_rate_search_probes():
    """The rates table mixes probes on the first requests with full runs; --help says how many."""
    from scalesim.app.serve import SEARCH_REQUESTS

    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=120)
    text = " ".join(result.output.split())
    assert f"first {SEARCH_REQUESTS} requests" in text and "--max-seconds" in text


def test_the_top_help_starts_a_new_user_with_commands_whose_files_exist():
    # `scalesim --help` said only "See scenarios/ for examples": no command to type first
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    result = CliRunner().invoke(main, ["--help"], terminal_width=120)
    examples = [line.split() for line in result.output.splitlines() if line.strip().startswith("scalesim ")]
    assert "Start here" in result.output and {e[1] for e in examples} >= {"run", "compare", "sweep"}
    files = [w for e in examples for w in e if w.endswith(".yaml")]
    assert files and all((root / f).is_file() for f in files), files
