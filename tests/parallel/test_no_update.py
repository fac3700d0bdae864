"""`training.optimizer: none` (forward and backward timed alone): no update runs, so ZeRO-1/2 has no
updated shards to all-gather, before or during the next forward."""

import pytest

from scalesim.app.setup import prepare
from scalesim.parallel.builder import build_program
from scalesim.program import CollectiveTask
from scalesim.scenario import Scenario


def zero_gathers(optimizer: str, overlap: bool) -> int:
    setup = prepare(Scenario.model_validate({
        "name": "no-update", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "llama3.2-1b",
        "training": {"precision": "bf16", "seq_len": 512, "global_batch": 16, "micro_batch": 2,
                     "optimizer": optimizer},
        "parallel": {"dp": 8, "zero": 1, "overlap_param_gather": overlap}}))
    program = build_program(setup.model, setup.gpu, setup.topology, setup.plan, symmetric=False)
    return sum(1 for t in program.tasks[0]
               if isinstance(t, CollectiveTask) and t.key.startswith("zero/"))


@pytest.mark.parametrize("overlap", [False, True])
def test_zero_gathers_parameters_only_after_an_update(overlap):
    assert zero_gathers("adamw", overlap) > 0
    assert zero_gathers("none", overlap) == 0
