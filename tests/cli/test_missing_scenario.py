"""A command run without its scenario file suggests one to copy (a file that exists, from where the
user is) and says where the examples are."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["run", "sweep", "compare", "serve"])
@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_no_scenario_file_suggests_an_example_that_exists_and_where_the_examples_are(command, where, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.chdir(REPO if where == "repo" else tmp_path)
    result = CliRunner().invoke(main, [command])
    assert result.exit_code == 2
    suggested = re.search(rf"`scalesim {command} ([^`]+)`", result.output)
    assert suggested, result.output
    files = [Path(f) for f in suggested.group(1).split()]
    assert files and all(f.suffix == ".yaml" and f.is_file() for f in files), result.output
    folder = re.search(r"the examples are in (\S+)", result.output)
    assert folder and Path(folder.group(1)).resolve() == (REPO / "scenarios").resolve(), result.output
    if where == "repo":
        assert f"scalesim {command} scenarios/" in result.output       # short: as typed from the checkout


@pytest.mark.parametrize("command", ["run", "sweep", "compare", "serve"])
def test_a_folder_given_as_the_scenario_names_a_file_in_it(command, monkeypatch):
    """`scalesim run scenarios` (the folder, not a file in it): the error names files to give instead."""
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(main, [command, "scenarios"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "scenarios is a directory" in result.output
    named = re.findall(r"(scenarios/[\w.-]+\.yaml)", result.output)
    assert named and all((REPO / f).is_file() for f in named), result.output
    assert named[0].startswith("scenarios/serve-") == (command == "serve")
