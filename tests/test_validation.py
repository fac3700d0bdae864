"""`scalesim validate` on the quick subset: a regression guard on accuracy, not the goal.

The goal (median |error| <= 10%, max <= 25%) is a tracked figure reported by
`scalesim validate`; this test only fails when the fast subset's median error
exceeds 20%, so a change that makes predictions much worse cannot land
unnoticed.
"""

import json

from click.testing import CliRunner

from scalesim.cli import main
from scalesim.validation import CATEGORIES, load_cases


def test_every_case_cites_a_source_and_ids_are_unique():
    cases = load_cases()
    assert len({c.id for c in cases}) == len(cases) >= 47
    assert all(c.source for c in cases)
    assert {c.category for c in cases} == set(CATEGORIES)


def test_fast_subset_median_error_stays_under_twenty_percent(tmp_path):
    result = CliRunner().invoke(main, ["validate", "--fast", "--json", "--plot", str(tmp_path / "parity.png")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["summary"]["count"] >= 25
    assert report["summary"]["median_abs_error"] <= 0.20
    for case in report["cases"]:
        assert set(case) >= {"id", "category", "predicted", "measured", "error"}
        if case["status"] == "ok":
            assert abs(case["error"] - (case["predicted"] - case["measured"]) / case["measured"]) < 1e-12
    assert (tmp_path / "parity.png").stat().st_size > 20_000


def test_only_one_category():
    result = CliRunner().invoke(main, ["validate", "--only", "collective", "--json"])
    report = json.loads(result.output)
    assert {c["category"] for c in report["cases"]} == {"collective"}
