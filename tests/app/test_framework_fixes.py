"""run's fixes for a plan that does not fit shard with the ZeRO stages the scenario's framework runs
(frameworks.zero_stages): nanotron has ZeRO-1 at most, so no fix or text may offer ZeRO-2 or 3."""

import re

from scalesim.app.fitting import _candidates, fit_options, more_gpus_option
from scalesim.app.run import run
from scalesim.app.setup import host_fit_reason, prepare
from scalesim.scenario import Scenario


def _nanotron(model: str, node: str = "rtx4090-pcie-8", gpus: int = 1, **parallel) -> Scenario:
    return Scenario.model_validate({"name": "nt", "cluster": {"node": node, "gpus": gpus}, "model": model,
                                    "training": {"framework": "nanotron", "seq_len": 2048, "global_batch": 8,
                                                 "micro_batch": 1}, "parallel": parallel})


def test_more_gpus_for_nanotron_shard_with_its_zero_1():
    setup = prepare(_nanotron("llama3.2-1b"))
    more = more_gpus_option(setup, host_fit_reason)
    assert more is not None and "parallel.zero: 1" in more.change, more
    assert more.memory_bytes <= setup.gpu.memory_bytes
    gpus = int(re.search(r"cluster.gpus: (\d+)", more.change).group(1))
    fixed = setup.scenario.with_changes(cluster={"gpus": gpus}, parallel={"zero": 1})     # nanotron runs it
    assert fixed.parallel.zero == 1


def test_no_fix_offers_nanotron_a_zero_stage_it_cannot_run():
    setup = prepare(_nanotron("llama3.2-3b", gpus=8))
    assert {c for c, _ in _candidates(setup) if "parallel.zero" in c} == {"parallel.zero: 1"}
    assert all(not re.search(r"parallel.zero: [23]", o.change) for o in fit_options(setup, limit=20))


def test_the_no_fit_text_names_nanotrons_highest_stage():
    huge = _nanotron("llama3-405b", node="rtx4090-pcie-4")
    reason = run(huge, baseline=False).reason
    assert "not even all 4 GPUs of the cluster with ZeRO-1" in reason and "ZeRO-3" not in reason
