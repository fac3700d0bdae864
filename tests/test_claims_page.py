"""docs/build_claims.py rebuilds the claims page: one section per claim, plots, byte for byte.

Runs the reduced (--quick) grids twice into temporary directories, in this process. Each claim
is a spec (docs/claims/<id>.yaml) and a rule (docs/claim_rules/); the build changes no global
state of the library (no monkey-patching, no module-level caches, no matplotlib rcParams).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import matplotlib
import pytest
import yaml

import scalesim.app.setup

SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "build_claims.py"


@pytest.fixture(scope="module")
def builder():
    name = "scalesim_docs_build_claims"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def two_builds(builder, tmp_path_factory):
    before = scalesim.app.setup.FULL_SIMULATION_MAX_GPUS
    style = dict(matplotlib.rcParams)
    first = tmp_path_factory.mktemp("claims-a")
    second = tmp_path_factory.mktemp("claims-b")
    written = builder.build(first, quick=True, log=lambda _m: None)
    builder.build(second, quick=True, log=lambda _m: None)
    assert scalesim.app.setup.FULL_SIMULATION_MAX_GPUS == before      # the build passes every_rank=False
    assert dict(matplotlib.rcParams) == style                         # plots style their own figures
    return first, second, written


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_one_section_per_claim_each_with_a_verdict(builder, two_builds):
    page = (two_builds[0] / "claims.md").read_text()
    ids = [claim_id for claim_id, _ in builder.CLAIMS]
    assert len(ids) == len(set(ids)) >= 8
    sections = re.split(r'^<a id="', page, flags=re.M)[1:]
    assert [s.split('"', 1)[0] for s in sections] == ids
    for number, section in enumerate(sections, 1):
        assert re.search(rf"^## {number}\. \S", section, flags=re.M), section[:200]
        verdict = [line for line in section.splitlines() if line.startswith("**Verdict:** **")]
        assert len(verdict) == 1, section[:200]
        assert len(verdict[0]) > 60
        assert f"--only {ids[number - 1]}" in section           # the command that regenerates it


def test_plots_exist_and_are_linked(two_builds):
    root, _, written = two_builds
    page = (root / "claims.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\((claims/[^)]+\.png)\)", page)
    assert len(linked) >= 8
    for rel in linked:
        data = (root / rel).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert sorted(str(p.relative_to(root)) for p in written[1:]) == sorted(linked)


def test_two_builds_are_byte_identical(two_builds):
    first, second, _ = two_builds
    a, b = _files(first), _files(second)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    assert str(first) not in a["claims.md"].decode()               # no absolute paths in the page


def test_every_claim_is_a_spec_with_quotes_scenarios_and_its_plot(builder):
    specs = builder.SPECS
    for claim_id, _ in builder.CLAIMS:
        spec = yaml.safe_load((specs / f"{claim_id}.yaml").read_text())
        assert spec["id"] == claim_id and spec["title"] and spec["quotes"]
        for entry in spec["scenarios"]:
            assert (builder.DOCS.parent / "scenarios" / "claims" / entry["file"]).is_file(), entry
        assert [p["file"] for p in spec["plots"]] == [f"{claim_id}.png"]


def test_the_build_script_stays_small():
    assert len(SCRIPT.read_text().splitlines()) < 300
