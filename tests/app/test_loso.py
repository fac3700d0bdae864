"""Leave-one-source-out: a source's cases are predicted with constants fitted without it."""

import json

from click.testing import CliRunner

from scalesim.cli import main
from scalesim.hardware.user_catalog import load_catalog
from scalesim.app.loso import catalog_without, load_fits, loso_jobs, source_key
from scalesim.app.validate import load_cases


def test_every_fit_names_the_cases_it_was_fitted_on_and_they_name_it():
    fits, cases = load_fits(), load_cases()
    fitted_sources = {source_key(c) for c in cases if c.fitted_on}
    assert fitted_sources == {f.source for f in fits}
    assert all(f.without != f.fitted and f.why for f in fits)


def test_without_its_source_a_fit_takes_the_other_sources_value_and_nothing_else_changes():
    catalog = load_catalog([])
    fit = next(f for f in load_fits() if f.link is not None)
    without = catalog_without(catalog, [fit])
    changed = {link.name for link, before in zip(without.link_specs, catalog.link_specs) if link != before}
    assert changed == set(fit.names()) & {link.name for link in catalog.link_specs}
    assert all(link.efficiency == fit.without for link in without.link_specs if link.name in changed)
    assert without.gpu_specs == catalog.gpu_specs


def test_only_the_fitted_sources_cases_are_predicted_again():
    cases = load_cases()
    jobs = loso_jobs(cases, None, load_fits())
    again = {i for indices, _ in jobs for i in indices}
    assert again and all(source_key(cases[i]) in {f.source for f in load_fits()} for i in again)
    assert not any(cases[i].supplementary for i in again)


def test_validate_reports_the_out_of_sample_figure_beside_the_in_sample_one():
    result = CliRunner().invoke(main, ["validate", "--only", "collective", "--json", "--workers", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    summary = report["summary"]
    assert {"loso_median_abs_error", "loso_max_abs_error"} <= set(summary)
    refit = [c for c in report["cases"] if c["loso_error"] != c["error"]]
    assert refit and all(c["fitted_on"] or c["id"].startswith("nccl-a100") for c in refit)
    # A case fitted on is predicted worse out of sample than in it (that is what a fit does).
    assert all(abs(c["loso_error"]) >= abs(c["error"]) for c in refit if c["fitted_on"])
