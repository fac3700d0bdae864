"""Every path a command writes is checked before any work: exit 2 naming the option, never a traceback."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = str(ROOT / "scenarios" / "8x4090-ddp.yaml")


@pytest.fixture
def afile(tmp_path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a directory")
    return path


def refused(args, option):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, OSError)
    assert f"'{option}'" in result.output
    return result.output


@pytest.mark.parametrize("args,option", [
    (["run", SCENARIO, "--no-plots", "--trace", "{afile}/t.json"], "--trace"),
    (["run", SCENARIO, "--no-scaling", "--out", "{afile}/plots"], "--out"),
    (["compare", SCENARIO, "--no-plots", "--report", "{afile}/r.html"], "--report"),
    (["compare", SCENARIO, "--out", "{afile}/deeper/plots"], "--out"),
    (["collective", "--topology", "dgx-h100", "--sizes", "1M", "--plot", "{afile}/p.png"], "--plot"),
    (["topology", "show", "dgx-h100", "--out", "{afile}/d.png"], "--out"),
    (["validate", "--fast", "--plot", "{afile}/parity.png"], "--plot"),
    (["sweep", SCENARIO, "--gpus", "8", "--out", "{afile}/sweep"], "--out"),
])
def test_an_output_under_a_file_is_refused_naming_the_option(afile, args, option):
    message = refused([a.format(afile=afile) for a in args], option)
    assert str(afile) in message and "not a directory" in message


def test_the_check_comes_before_the_simulation(afile, monkeypatch):
    import scalesim.app.compare

    def must_not_run(*args, **kwargs):
        raise AssertionError("simulated before the output path was checked")

    monkeypatch.setattr(scalesim.app.compare, "compare", must_not_run)
    refused(["compare", SCENARIO, "--no-plots", "--report", f"{afile}/r.html"], "--report")


def test_an_input_file_is_never_overwritten(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(Path(SCENARIO).read_text())
    message = refused(["run", str(scenario), "--no-plots", "--trace", str(scenario)], "--trace")
    assert "input file" in message
    assert scenario.read_text() == Path(SCENARIO).read_text()


def test_a_directory_given_as_a_file_is_refused(tmp_path):
    (tmp_path / "r.html").mkdir()
    message = refused(["compare", SCENARIO, "--no-plots", "--report", str(tmp_path / "r.html")], "--report")
    assert "is a directory" in message


def test_a_wrong_suffix_is_refused_before_the_work():
    message = refused(["collective", "--topology", "dgx-h100", "--plot", "bw.txt"], "--plot")
    assert ".png" in message


def test_missing_directories_are_fine(tmp_path):
    trace = tmp_path / "new" / "deeper" / "t.json"
    result = CliRunner().invoke(main, ["run", SCENARIO, "--no-plots", "--no-scaling", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert trace.is_file()


@pytest.mark.parametrize("args,option", [
    (["run", SCENARIO, "--no-plots", "--no-scaling", "--trace", "{d}/mine.json"], "--trace"),
    (["compare", SCENARIO, SCENARIO, "--no-plots", "--report", "{d}/mine.html"], "--report"),
    (["compare", SCENARIO, SCENARIO, "--no-plots", "--csv", "{d}/mine.csv"], "--csv"),
    (["collective", "--topology", "dgx-h100", "--sizes", "1M", "--plot", "{d}/mine.png"], "--plot"),
    (["collective", "--topology", "dgx-h100", "--sizes", "1M", "--plot", "{d}/mine.svg"], "--plot"),
    (["topology", "show", "dgx-h100", "--out", "{d}/mine.png"], "--out"),
    (["validate", "--fast", "--plot", "{d}/mine.pdf"], "--plot"),
])
def test_a_file_the_user_wrote_is_never_overwritten(tmp_path, args, option):
    args = [a.format(d=tmp_path) for a in args]
    path = Path(args[-1])
    path.write_text("the user's own notes\n")
    message = refused(args, option)
    assert "scalesim did not write it" in message and str(path) in message
    assert path.read_text() == "the user's own notes\n"


def test_a_trace_under_any_name_is_written_again(tmp_path):
    trace = tmp_path / "step.trace"
    for _ in range(2):
        result = CliRunner().invoke(main, ["run", SCENARIO, "--no-plots", "--no-scaling", "--trace", str(trace)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", ["d.png", "d.svg"])
def test_a_file_scalesim_wrote_is_written_again(tmp_path, name):
    """Run the same command twice: the second run replaces its own drawing, as before."""
    path = tmp_path / name
    for _ in range(2):
        result = CliRunner().invoke(main, ["topology", "show", "dgx-h100", "--out", str(path)])
        assert result.exit_code == 0, result.output
    empty = tmp_path / "empty.png"          # an empty file holds nothing to lose
    empty.touch()
    assert CliRunner().invoke(main, ["topology", "show", "dgx-h100", "--out", str(empty)]).exit_code == 0


def test_traces_reports_and_tables_carry_the_mark_that_lets_them_be_rewritten(tmp_path):
    from scalesim.outputs import written_by_scalesim

    trace, report, table = tmp_path / "t.json", tmp_path / "r.html", tmp_path / "t.csv"
    for args in (["run", SCENARIO, "--no-plots", "--no-scaling", "--trace", str(trace)],
                 ["compare", SCENARIO, SCENARIO, "--no-plots", "--report", str(report), "--csv", str(table)]):
        assert CliRunner().invoke(main, args).exit_code == 0
    assert all(written_by_scalesim(p) for p in (trace, report, table))


SERVING = str(ROOT / "scenarios" / "serve-1x4090-llama3-8b.yaml")


@pytest.mark.parametrize("args, name", [
    (["run", SCENARIO, "--no-scaling"], "timeline.png"),
    (["compare", SCENARIO, SCENARIO], "breakdown.png"),
    (["compare", SERVING, SERVING], "serving-pareto.png"),
    (["serve", SERVING, "--rates", "1"], "latency-percentiles.png"),
    (["sweep", SCENARIO, "--gpus", "8"], "sweep.csv"),
])
def test_a_file_of_the_users_where_a_command_writes_its_plots_is_never_overwritten(tmp_path, args, name):
    """--out names a folder; a file of the user's there under the name of one the command writes is
    refused before any work, and left as it was."""
    mine = tmp_path / name
    mine.write_text("the user's own notes\n")
    message = refused([*args, "--out", str(tmp_path)], "--out")
    assert "scalesim did not write it" in message and str(mine) in message
    assert mine.read_text() == "the user's own notes\n"


def test_plots_an_earlier_scalesim_drew_are_drawn_again(tmp_path):
    """Plots from before the mark carry matplotlib's own PNG tag: a re-run into the same folder replaces them."""
    from scalesim.report.figures import new_figure

    fig, ax = new_figure((2, 2))
    ax.plot([0, 1])
    fig.savefig(tmp_path / "timeline.png")              # matplotlib's default metadata, as before the mark
    result = CliRunner().invoke(main, ["run", SCENARIO, "--no-scaling", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    from scalesim.outputs import written_by_scalesim

    assert written_by_scalesim(tmp_path / "timeline.png")
