"""The catalog and collective commands as a user calls them."""

import json

from click.testing import CliRunner

from scalesim.cli import main


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result


def test_collective_json_rows_follow_the_contract_and_nccl_tests_definitions():
    result = invoke("collective", "--topology", "dgx-a100", "--op", "all_gather", "--sizes", "1M:4M", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["bytes"] for r in rows] == [2**20, 2**21, 2**22]
    for r in rows:
        assert {"op", "algo", "gpus", "bytes", "time_s", "algbw_GBps", "busbw_GBps"} <= set(r)
        assert abs(r["algbw_GBps"] - r["bytes"] / r["time_s"] / 1e9) < 1e-9
        assert abs(r["busbw_GBps"] - r["algbw_GBps"] * 7 / 8) < 1e-9


def test_collective_compares_topologies_on_one_plot(tmp_path):
    out = tmp_path / "bw.png"
    result = invoke("collective", "--topology", "rtx4090-pcie-8", "--topology", "dgx-h100", "--sizes", "1M,1G",
                    "--plot", str(out))
    assert result.exit_code == 0 and out.stat().st_size > 10_000
    assert "rtx4090-pcie-8" in result.output and "dgx-h100" in result.output


def test_collective_across_nodes_needs_a_fabric():
    result = invoke("collective", "--topology", "dgx-h100", "--nodes", "2", "--sizes", "1M")
    assert result.exit_code == 2 and "--fabric" in result.output
    ok = invoke("collective", "--topology", "dgx-h100", "--nodes", "2", "--fabric", "ib-ndr", "--sizes", "1G", "--json")
    assert json.loads(ok.stdout)[0]["gpus"] == 16


def test_bad_sizes_and_algorithms_exit_2():
    assert invoke("collective", "--topology", "dgx-a100", "--sizes", "8X").exit_code == 2
    result = invoke("collective", "--topology", "dgx-a100", "--algo", "nvls", "--sizes", "1M")
    assert result.exit_code == 2 and "ring" in result.output    # A100's NVSwitch cannot reduce


def test_catalog_listings():
    for command in (["hardware"], ["topologies"], ["models"], ["hardware", "h100-sxm"]):
        result = invoke(*command)
        assert result.exit_code == 0 and result.output.strip()
    data = json.loads(invoke("hardware", "--json").stdout)
    assert {g["name"] for g in data["gpus"]} >= {"rtx4090", "a100-80gb-sxm", "h100-sxm", "b200"}
    assert all(g["source"] for g in data["gpus"] + data["links"])
    assert invoke("hardware", "h100-sxn").exit_code == 2


def test_a_catalog_entry_shows_what_was_estimated_or_fitted_and_why():
    # A user judging a prediction needs more than the number: which values are
    # engineering estimates, which were fitted, and on what.
    detail = invoke("hardware", "h100-sxm").output
    assert "training_clock_fraction: FITTED" in " ".join(detail.split())
    assert "estimated" in invoke("hardware", "rtx3090").output
    data = json.loads(invoke("hardware", "--json").stdout)
    by_name = {e["name"]: e for e in data["gpus"] + data["links"]}
    assert "memory_bw_efficiency" in by_name["rtx3090"]["estimated"]
    assert any("nccl#1161" in note for note in by_name["nvlink4-bridge"]["notes"])


def test_topology_show_draws_the_design(tmp_path):
    out = tmp_path / "dgx.svg"
    result = invoke("topology", "show", "dgx-h100", "--out", str(out))
    assert result.exit_code == 0 and out.read_text().startswith("<?xml")
    assert invoke("topology", "show", "dgx-h100", "--out", str(tmp_path / "x.jpg")).exit_code == 2


def test_run_pauses_the_garbage_collector_only_while_it_answers(tmp_path, monkeypatch):
    """`run` turns Python's cyclic collector off while it answers and on again after, even when it
    exits with a code: a test runner calling it goes on collecting."""
    import gc

    from scalesim.app import run as run_module

    seen = []
    real = run_module.run_setup

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "run_setup", spy)
    assert gc.isenabled()
    result = CliRunner().invoke(main, ["run", "scenarios/8x4090-ddp.yaml", "--json", "--no-plots"])
    assert result.exit_code in (0, 3), result.output
    assert seen == [False]
    assert gc.isenabled()


def test_the_model_zoo_gives_billions_as_billions():
    # DeepSeek-V3 read "671,026.4 M", Llama 2 7B "6,738.4 M": a buyer asking whether a 7B fits counts digits
    from rich.console import Console

    from scalesim.report.catalogs import models_table

    console = Console(width=250)
    with console.capture() as out:
        console.print(models_table())
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:6]] for line in out.get().splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert rows["llama2-7b"][1] == "6.74 B" and rows["gpt2-350m"][1] == "354.8 M"
    assert rows["mixtral-8x7b"][1:3] == ["46.7 B", "12.9 B"]
    assert "active per token" in out.get()
