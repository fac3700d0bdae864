"""`scalesim validate` on the quick subset: a regression guard on accuracy, not the goal.

The goal (median |error| <= 10%, max <= 25%) is a tracked figure reported by
`scalesim validate`; this test only fails when the fast subset's median error
exceeds 20%, so a change that makes predictions much worse cannot land
unnoticed.
"""

import json

import pytest
import yaml

from click.testing import CliRunner

from scalesim.cli import main
from scalesim.app.validate import CATEGORIES, load_cases


# Emptied by fit8: the BERT QA head, OPT's score kernels and TE's fp8 inputs (validation/memory-notes.md).
STILL_PREDICTED_NOT_TO_FIT: set[str] = set()


def test_every_case_cites_a_source_and_ids_are_unique():
    cases = load_cases()
    assert len({c.id for c in cases}) == len(cases) >= 47
    assert all(c.source for c in cases)
    assert {c.category for c in cases} == set(CATEGORIES)


def test_fast_subset_median_error_outside_the_fit_stays_under_twenty_percent(tmp_path):
    # The gate is on the cases no constant was fitted on; the fitted ones have their own row.
    result = CliRunner().invoke(main, ["validate", "--fast", "--json", "--plot", str(tmp_path / "parity.png")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    fitted = [c for c in report["cases"] if c["fitted_on"] and c["error"] is not None]
    assert fitted and report["in_sample"]["count"] == len(fitted)
    assert not {c["id"] for c in fitted} & {c["id"] for c in report["cases"] if not c["fitted_on"]}
    assert report["summary"]["count"] >= 20
    assert report["summary"]["median_abs_error"] <= 0.20
    for case in report["cases"]:
        assert set(case) >= {"id", "category", "predicted", "measured", "error"}
        if case["status"] == "ok":
            assert abs(case["error"] - (case["predicted"] - case["measured"]) / case["measured"]) < 1e-12
    assert (tmp_path / "parity.png").stat().st_size > 20_000
    # Every measured run trained, so none may be judged "does not fit" (issue 17). The ones still
    # judged so are listed here, to be emptied, never grown.
    assert set(report["predicted_not_to_fit"]) <= STILL_PREDICTED_NOT_TO_FIT
    assert report["predicted_not_to_fit"] == [c["id"] for c in report["cases"] if c["predicted_fits"] is False]


def test_only_one_category():
    result = CliRunner().invoke(main, ["validate", "--only", "collective", "--json"])
    report = json.loads(result.stdout)
    assert {c["category"] for c in report["cases"]} == {"collective"}


def test_conv_model_cases_state_the_memory_format_they_ran():
    # NCHW vs NHWC changes a 16-bit ResNet step by ~1.4-1.6x (cuDNN layout conversions), so a
    # validation scenario of a conv model must say which one its source used rather than rely on
    # the default.
    from scalesim.scenario import load_scenario
    from scalesim.app.validate import cases_file

    checked = 0
    for case in load_cases():
        if case.scenario is None:
            continue
        path = cases_file().parent / case.scenario
        raw = yaml.safe_load(path.read_text())
        if str(raw.get("model", "")).startswith("resnet"):
            assert "memory_format" in raw["training"], case.id
            scenario, _ = load_scenario(path)
            assert scenario.training.memory_format in ("nhwc", "nchw")
            checked += 1
    assert checked >= 8


def test_cases_far_off_print_what_is_known_and_still_count():
    from scalesim.report.validation import FAR_OFF, validation_table
    from scalesim.app.validate import Outcome, summarise

    by_id = {c.id: c for c in load_cases()}
    known = by_id["nccl-h100pcie-x2-nvlink-bridge"]
    assert known.known_miss
    other = by_id["nccl-a100x8-allreduce-single-node"]
    outcomes = [Outcome(known, "ok", known.measured * 2.0), Outcome(other, "ok", other.measured * (1 + FAR_OFF + 0.1)),
                Outcome(by_id["lambda-rtx-3090-resnet50"], "ok", 900.0)]
    tables = validation_table(outcomes, {"overall": summarise(outcomes)})
    assert len(tables) == 3                                  # cases, summary, and the far-off explanations
    far = tables[2]
    assert list(far.columns[0].cells) == [known.id, other.id]      # largest error first; the near case is absent
    assert list(far.columns[2].cells) == [known.known_miss, "not investigated yet"]
    assert summarise(outcomes).max_abs_error == 1.0         # explained or not, they count
    assert Outcome(known, "ok", 1.0).to_json()["known_miss"] == known.known_miss


def test_supplementary_cases_get_their_own_row_and_stay_out_of_the_tracked_figure():
    result = CliRunner().invoke(main, ["validate", "--fast", "--only", "multi_gpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    extra = [c for c in report["cases"] if c["supplementary"]]
    reference = [c for c in report["cases"]
                 if not c["supplementary"] and not c["disputed"] and c["error"] is not None]
    assert extra and report["supplementary"]["count"] == len(extra)
    assert report["summary"]["count"] == len(reference)
    assert report["by_category"]["multi_gpu"]["count"] == len(reference)
    # Every supplementary case says where it comes from, like the reference cases.
    assert all(c["source"] for c in extra)


def test_cases_simulated_side_by_side_give_the_same_report_as_one_after_another():
    runs = [CliRunner().invoke(main, ["validate", "--only", "collective", "--json", "--workers", n])
            for n in ("1", "2")]
    assert [r.exit_code for r in runs] == [0, 0]
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)


def test_the_overall_figure_counts_only_the_shared_reference_set():
    # `overall` is the tracked figure for shared/validation; a measurement the project added on
    # its own (NVIDIA's DLE table, Lambda's 2021 and 2023 logs, MosaicML's H100 rows) must be
    # marked supplementary so it is reported beside that figure, not inside it.
    from pathlib import Path

    import pytest

    published = Path(__file__).resolve().parents[3] / "shared" / "validation" / "published.yaml"
    if not published.exists():
        pytest.skip(f"reference set not beside this checkout ({published})")
    reference = {m["id"] for m in yaml.safe_load(published.read_text())["measurements"]}
    cases = load_cases()
    assert {c.id for c in cases if not c.supplementary and not c.collected_from} == reference
    assert all(c.id not in reference for c in cases if c.supplementary or c.collected_from)


def test_validate_reads_the_same_figures_as_run_without_its_extras():
    """validate computes run's metrics without the fix search, costs or the 1-GPU baseline it
    does not need: every figure it reports equals run's, to the last digit."""
    from scalesim.app.run import run
    from scalesim.app.validate import _predict_training, cases_file
    from scalesim.scenario import load_scenario

    path = cases_file().parent / "scenarios" / "lambda-2x-rtx-3090-bert-large-squad.yaml"
    result = run(*load_scenario(path))
    full = _predict_training(path)
    assert full["step_time_s"] == result.step_time_s and full["samples_per_s"] == result.samples_per_s
    assert full["tflops_per_gpu"] == result.tflops_per_gpu
    assert full["peak_memory_GiB"] == result.memory_per_gpu_bytes / 2**30
    # one stage: rank 0's reserved is run's, the caching allocator's share of the need
    assert full["peak_reserved_GiB"] == result.memory_reserved_bytes / 2**30 < full["peak_memory_GiB"]
    assert full["scaling_efficiency"] == result.scaling_efficiency
    assert _predict_training(path, wanted=frozenset({"samples_per_s"})) == {
        k: v for k, v in full.items() if k != "scaling_efficiency"}


@pytest.mark.parametrize("name", ["lambda-rtx-3090-bert-large-squad", "lambda-a100-80gb-sxm4-bert-large-squad",
                                  "neusight-h100-opt-13-train-s2048-b2", "mbridge-qwen3-235b-a22b-fp8-64xb200"])
def test_runs_that_trained_are_predicted_to_fit(name):
    """Issue #17: a run that really trained must not be predicted not to fit. Lambda's BERT-large SQuAD runs
    (batch 28 on a 24 GiB card, 112 on 80 GB) trained DLE's BertForQuestionAnswering, which has no
    vocabulary-sized logits; NeuSight's OPT-1.3B (fp32, batch 2 x 2048) keeps no attention-dropout mask or
    output (attention_dropout 0.0); Megatron Bridge's MXFP8 runs keep Transformer Engine's fp8 input copies."""
    from scalesim.app.validate import _predict_training, cases_file

    path = cases_file().parent / "scenarios" / f"{name}.yaml"
    assert _predict_training(path, wanted=frozenset({"samples_per_s"}))["fits"] > 0


def test_a_catalog_folder_reaches_the_serving_cases(tmp_path):
    """`validate --catalog` checks a calibrated folder against every case, serving ones included:
    a GPU whose memory streams at half the rate decodes slower (decode reads the weights)."""
    from scalesim.app.validate import _predict_scenario
    from scalesim.hardware import get_gpu
    from scalesim.hardware.user_catalog import load_catalog

    path = tmp_path / "serve.yaml"
    path.write_text("name: s\ncluster: {node: dgx-h100, gpus: 1}\nmodel: llama3-8b\n"
                    "serving: {tp: 1, max_batch_tokens: 2048, max_seqs: 8, requests: {concurrency: 4, count: 8,\n"
                    "  prompt_tokens: 128, output_tokens: 32, seed: 0}, slo: {ttft_s: 1.0, tpot_s: 0.05}}\n")
    folder = tmp_path / "cat"
    folder.mkdir()
    half = get_gpu("h100-sxm").memory_bw_efficiency / 2
    (folder / "gpus.yaml").write_text(f"h100-sxm: {{base: h100-sxm, memory_bw_efficiency: {half}}}\n")
    stock = _predict_scenario(path)
    slow = _predict_scenario(path, load_catalog([folder]))
    assert slow["output_tokens_per_s"] < 0.8 * stock["output_tokens_per_s"]
