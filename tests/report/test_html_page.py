"""The compare --report page: images fit the page's column (no horizontal scroll bar under each)."""

import re

from scalesim.report.html import CSS


def _rule(selector: str) -> str:
    return re.search(r"(?m)^" + re.escape(selector) + r"\s*\{([^}]*)\}", CSS).group(1)


def test_an_image_at_full_width_with_a_border_still_fits_its_box():
    """max-width: 100% sizes the content box; a 1px border then overflows the scroll box by 2px,
    and every plot got a scroll bar. border-box counts the border inside the 100%."""
    img = _rule("img")
    if "max-width: 100%" in img and "border:" in img:
        assert "box-sizing: border-box" in img


def test_the_page_explains_a_missing_gpu_price_and_a_scaling_above_100_percent():
    from scalesim.report.html import compare_html

    def row(name, purchase, scaling):
        return {"file": f"{name}.yaml", "scenario": name, "gpus": 8, "gpu": "x", "fits": True,
                "memory_per_gpu_bytes": 1, "memory_capacity_bytes": 2, "step_time_s": 1.0, "tokens_per_s": 1e5,
                "samples_per_s": 100.0, "mfu": 0.5, "scaling_efficiency": scaling, "time_to_train_s": 1e5,
                "cost_usd": 10.0, "on_prem_cost_usd": None if purchase is None else 5.0, "energy_kwh": 1.0,
                "goodput": 0.99, "purchase_usd": purchase, "break_even_months": None}

    page = compare_html({"table": [row("a", 1e5, 0.9), row("b", None, 1.02)], "designs": []}, {})
    assert "n/a (no GPU price)" in page and "pricing.ownership.gpu_usd" in page and "above 100%" in page
    page = compare_html({"table": [row("a", 1e5, 0.9)], "designs": []}, {})
    assert "pricing.ownership.gpu_usd" not in page


def test_the_tab_shows_the_title_and_the_words_are_explained_under_the_table_before_the_plots():
    # the <title> was not an f-string (the browser tab read "{escape(title)}"), and "How to read this"
    # came after the plots and the assumptions, a long scroll from the table it explains
    from scalesim.report.html import compare_html
    row = {"file": "a.yaml", "scenario": "a", "gpus": 8, "gpu": "x", "fits": True, "memory_per_gpu_bytes": 1,
           "memory_capacity_bytes": 2, "step_time_s": 1.0, "tokens_per_s": 1e5, "samples_per_s": 100.0,
           "mfu": 0.5, "scaling_efficiency": 0.9, "time_to_train_s": 1e5, "cost_usd": 10.0, "on_prem_cost_usd": 5.0,
           "energy_kwh": 1.0, "goodput": 0.99, "purchase_usd": 1e5, "break_even_months": 12.0, "plan": "dp8 mb8"}
    page = compare_html({"table": [row], "designs": []}, {}, title="4090 <vs> A100")
    assert "<title>4090 &lt;vs&gt; A100</title>" in page
    assert page.index("<h2>Summary</h2>") < page.index("<h2>How to read this</h2>") < page.index("<h2>Plots</h2>")
