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


def test_an_na_on_prem_cost_names_the_key_that_prices_the_gpu():
    summary = {"ok": 1, "dominated": 0, "does_not_fit": 0, "not_available": 0}
    best = {"gpus": 8, "status": "ok", "nodes": 1, "plan": "dp8", "memory_per_gpu_bytes": 1, "step_time_s": 1.0,
            "tokens_per_s_per_gpu": 1.0, "mfu": 0.5, "time_to_train_s": 10.0, "cost_usd": 5.0}
    sweep = {"scenario": "8x B200", "rank_by": "time", "summary": {8: summary},
             "best": [{**best, "on_prem_cost_usd": None}]}
    assert "pricing.ownership.gpu_usd" in str(sweep_table(sweep).caption)
    sweep["best"] = [{**best, "on_prem_cost_usd": 3.0}]
    assert "pricing." not in str(sweep_table(sweep).caption)


def test_a_gpu_with_neither_price_names_both_keys_and_no_budget_names_none():
    # rubin has no cloud and no purchase price: both cost columns say n/a and the caption names both keys
    summary = {"ok": 1, "dominated": 0, "does_not_fit": 0, "not_available": 0}
    best = {"gpus": 8, "status": "ok", "nodes": 1, "plan": "tp8", "memory_per_gpu_bytes": 1, "step_time_s": 1.0,
            "tokens_per_s_per_gpu": 1.0, "mfu": 0.5, "time_to_train_s": 10.0, "cost_usd": None,
            "on_prem_cost_usd": None}
    sweep = {"scenario": "8x Rubin", "rank_by": "time", "summary": {8: summary}, "best": [best]}
    caption = str(sweep_table(sweep).caption)
    assert "pricing.gpu_hour_usd" in caption and "pricing.ownership.gpu_usd" in caption
    sweep["best"] = [{**best, "time_to_train_s": None}]      # no training budget: no cost to price at all
    assert "pricing." not in str(sweep_table(sweep).caption)


def test_the_caption_says_what_the_plan_words_mfu_and_dominated_mean():
    # "dp8 zero3 mb2 rc-full", "MFU" and "dominated" were printed with no word of explanation
    summary = {"ok": 1, "dominated": 3, "does_not_fit": 0, "not_available": 0}
    best = {"gpus": 8, "status": "ok", "nodes": 1, "plan": "dp8 zero3 mb2 rc-full", "memory_per_gpu_bytes": 1,
            "step_time_s": 1.0, "tokens_per_s_per_gpu": 1.0, "mfu": 0.5, "time_to_train_s": 10.0, "cost_usd": 5.0,
            "on_prem_cost_usd": 3.0}
    caption = str(sweep_table({"scenario": "8x RTX 4090", "rank_by": "time", "summary": {8: summary},
                               "best": [best]}).caption)
    for word in ("dpN = N-way data parallel", "zeroN = ZeRO stage", "mbN = micro-batch", "rc-X = activation recompute",
                 "MFU (model FLOPs utilisation)", "Dominated:"):
        assert word in caption, word
    assert "tpN" not in caption            # only the words the plans use
    summary["dominated"] = 0
    assert "Dominated" not in str(sweep_table({"scenario": "8x RTX 4090", "rank_by": "time", "summary": {8: summary},
                                               "best": [best]}).caption)
