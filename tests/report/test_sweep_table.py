"""The sweep's table of best plans per GPU count."""

from rich.console import Console

from scalesim.report.sweep_table import sweep_table


def test_a_gpu_count_with_no_plan_shows_its_node_count():
    # The nodes column was blank for a GPU count whose plans all ran out of memory.
    summary = {"ok": 0, "dominated": 0, "does_not_fit": 1, "not_available": 0}
    sweep = {"scenario": "8x RTX 4090, Llama 3 405B", "rank_by": "time",
             "best": [{"gpus": 16, "status": "none", "nodes": 2, "reason": "no plan fits"}],
             "summary": {16: summary}}
    console = Console(width=250)
    with console.capture() as out:
        console.print(sweep_table(sweep))
    (row,) = [line.split("│")[1:3] for line in out.get().splitlines() if "none" in line]
    assert [cell.strip() for cell in row] == ["16", "2"]
