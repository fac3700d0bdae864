"""compare's table: the best value of each ranked row is bold, throughput too (the highest
tokens/s; it was never bold while step time, MFU and time to train were)."""

from scalesim.report.comparison import summary_rows
from scalesim.report.formatting import bold_flags


def _row(name, tokens_per_s, fits=True):
    return {"scenario": name, "gpus": 8, "gpu": "x", "fits": fits, "memory_per_gpu_bytes": 1, "memory_capacity_bytes": 2,
            "step_time_s": 1e6 / tokens_per_s, "tokens_per_s": tokens_per_s, "samples_per_s": tokens_per_s / 1024,
            "mfu": 0.5, "scaling_efficiency": 0.9, "time_to_train_s": 1e10 / tokens_per_s, "cost_usd": 10.0,
            "on_prem_cost_usd": 5.0, "energy_kwh": 1.0, "goodput": 0.99}


def test_the_highest_throughput_among_designs_that_fit_is_bold():
    rows = [_row("a", 293_401.0), _row("b", 1_323_000.0), _row("c", 2_000_000.0, fits=False)]
    throughput = next(r for r in summary_rows(rows) if r[0] == "throughput")
    _name, values, best, lowest = throughput
    assert bold_flags(best, lowest, len(values)) == [False, True, False]


def test_a_design_without_a_purchase_price_never_says_renting_is_cheaper():
    priced = {**_row("a", 1e5), "purchase_usd": 1e5, "break_even_months": None}
    unpriced = {**_row("b", 1e5), "purchase_usd": None, "break_even_months": None, "on_prem_cost_usd": None}
    _name, values, _best, _lowest = next(r for r in summary_rows([priced, unpriced])
                                         if r[0] == "owning beats renting after")
    assert values[0] == "never (renting is cheaper)"
    assert "never" not in values[1] and "n/a" in values[1]
    from scalesim.report.comparison import compare_table
    assert "pricing.ownership.gpu_usd" in str(compare_table([priced, unpriced]).caption)
    assert "pricing.ownership.gpu_usd" not in str(compare_table([priced]).caption)


def test_a_scaling_efficiency_above_100_percent_is_explained_under_the_table():
    from scalesim.report.comparison import compare_table
    above = {**_row("a", 1e5), "scaling_efficiency": 1.016}
    assert "above 100%" in str(compare_table([above, _row("b", 2e5)]).caption)
    assert "above 100%" not in str(compare_table([_row("a", 1e5), _row("b", 2e5)]).caption)


def test_a_design_without_a_cloud_price_names_the_key_under_the_table_and_on_the_page():
    # rubin has no cloud price: its cloud rows say n/a, and the caption (and the HTML page) name the key
    from scalesim.report.comparison import compare_table
    from scalesim.report.html import compare_html
    rented = {**_row("a", 1e5), "file": "a.yaml", "gpu_hour_usd": 2.0, "purchase_usd": 1e5}
    unrented = {**_row("b", 1e5), "file": "b.yaml", "gpu_hour_usd": None, "cost_usd": None, "purchase_usd": 1e5}
    assert "pricing.gpu_hour_usd" in str(compare_table([rented, unrented]).caption)
    assert "pricing.gpu_hour_usd" not in str(compare_table([rented]).caption)
    page = compare_html({"table": [rented, unrented], "designs": []}, {})
    assert "pricing.gpu_hour_usd" in page


def test_break_even_says_what_it_lacks_and_never_only_when_renting_stays_cheaper():
    # a DGX Spark has a purchase price but no cloud price; a scenario without tokens has no time to train:
    # neither is "renting is cheaper"
    priced = {**_row("a", 1e5), "purchase_usd": 1e5, "gpu_hour_usd": 2.0, "break_even_months": None}
    unrented = {**priced, "scenario": "b", "gpu_hour_usd": None}
    unbudgeted = {**priced, "scenario": "c", "time_to_train_s": None}
    _name, values, _best, _lowest = next(r for r in summary_rows([priced, unrented, unbudgeted])
                                         if r[0] == "owning beats renting after")
    assert values[0] == "never (renting is cheaper)"
    assert values[1] == "n/a (no GPU-hour price)" and values[2] == "n/a (no training budget)"


def test_the_gpu_hour_price_keeps_its_tenth_of_a_cent_in_the_table_and_the_catalog_listing():
    # the RTX 4090's $0.375 showed as $0.38 in compare and `hardware`, while run said $0.375: a buyer checking
    # 8 GPUs x 9.65 h x $0.38 = $29.34 against the table's $28.95 found the tool wrong
    from scalesim.report.catalogs import hardware_tables, readable_value
    row = {**_row("a", 1e5), "gpu_hour_usd": 0.375}
    _name, values, _best, _lowest = next(r for r in summary_rows([row]) if r[0] == "GPU-hour price (cloud)")
    assert values == ["$0.375"]
    assert readable_value("cloud_usd_per_gpu_hour", 0.375) == "$0.375 per GPU-hour"
    gpus = hardware_tables()[0]
    names, prices = gpus.columns[0]._cells, gpus.columns[-1]._cells
    assert prices[names.index("rtx4090")] == "0.375"


def test_the_table_and_the_page_say_what_mfu_goodput_and_the_plan_words_mean():
    # compare printed "dp8 zero3 mb2 rc-full" and "MFU" with no word of explanation, in the terminal and the page
    from scalesim.report.comparison import compare_table
    from scalesim.report.html import compare_html
    rows = [{**_row("a", 1e5), "file": "a.yaml", "plan": "dp8 zero3 mb2 rc-full"},
            {**_row("b", 2e5), "file": "b.yaml", "plan": "dp8 mb8"}]
    caption = str(compare_table(rows).caption)
    page = compare_html({"table": rows, "designs": []}, {})
    for text in (caption, page):
        for word in ("dpN = N-way data parallel", "zeroN = ZeRO stage", "mbN = micro-batch",
                     "rc-X = activation recompute", "MFU (model FLOPs utilisation)"):
            assert word in text, word
        assert "tpN" not in text
    assert "Goodput: the share of the wall time" in page


def test_scaling_efficiency_is_marked_against_a_one_gpu_run_that_would_not_fit_and_na_on_one_gpu():
    # ux15b: a 1-GPU design's 100% is no efficiency (and never the bold best); a sharded design's
    # efficiency says when its 1-GPU reference could not run
    one = {**_row("one", 1e5), "gpus": 1, "scaling_efficiency": 1.0, "scaling_reference_fits": True,
           "scaling_reference_memory_bytes": 1}
    sharded = {**_row("z3", 2e5), "scaling_efficiency": 0.548, "scaling_reference_fits": False,
               "scaling_reference_memory_bytes": 116 * 2 ** 30, "memory_capacity_bytes": 24 * 2 ** 30}
    fitting = {**_row("ddp", 2e5), "scaling_efficiency": 0.7, "scaling_reference_fits": True}
    _name, values, best, lowest = next(r for r in summary_rows([one, sharded, fitting]) if r[0] == "scaling efficiency")
    assert values == ["n/a (1 GPU)", "54.8% (against a 1-GPU run that would not fit: 116.0 GiB of 24.0 GiB)", "70.0%"]
    assert bold_flags(best, lowest, 3) == [False, False, True]


def test_the_comparison_scaling_plot_draws_points_that_would_not_fit_hollow_and_says_so(tmp_path, monkeypatch):
    # ux15b: a ZeRO-3 design's 1- to 4-GPU points could not run; its curve says which
    import matplotlib.axes

    from scalesim.report.comparison import scaling_plot

    hollow, titles = [], []
    plot, set_title = matplotlib.axes.Axes.plot, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *a, **kw: (
        kw.get("color") == "white" and hollow.append(list(a[0]))) or plot(self, *a, **kw))
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda self, text, *a, **kw: titles.append(text) or set_title(self, text, *a, **kw))
    curve = [{"gpus": g, "scaling_efficiency": e, "fits": f} for g, e, f in ((1, 1.0, False), (4, 0.4, False),
                                                                              (8, 0.3, True))]
    fitting = [{**p, "fits": True} for p in curve]
    scaling_plot([{**_row("ddp", 1e5), "scaling": fitting}, {**_row("z3", 1e5), "scaling": curve}], tmp_path / "a.png")
    assert hollow == [[1, 4]] and "would not fit" in titles[-1]
    scaling_plot([{**_row("ddp", 1e5), "scaling": fitting}], tmp_path / "b.png")
    assert hollow == [[1, 4]] and "would not fit" not in titles[-1]
