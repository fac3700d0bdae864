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
