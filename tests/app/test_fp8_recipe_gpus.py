"""fp8_recipe transformer-engine-mxfp8 only where Transformer Engine runs MXFP8 (costs/fp8_grad_casts.py mxfp8_runs)."""

import pytest

from scalesim.app.setup import prepare
from scalesim.errors import InputError
from scalesim.scenario import load_scenario

TEXT = ("name: t\ncluster: {node: %s}\nmodel: llama3-8b\ntraining: {precision: fp8, seq_len: 2048, "
        "global_batch: 8, micro_batch: 1, fp8_recipe: transformer-engine-mxfp8}\nparallel: {dp: 8}\n")


def test_mxfp8_is_refused_before_blackwell(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TEXT % "dgx-h100")
    with pytest.raises(InputError) as err:
        prepare(*load_scenario(path))
    assert err.value.key == "training.fp8_recipe" and "transformer-engine-current" in str(err.value)


def test_mxfp8_runs_on_b200(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TEXT % "hgx-b200")
    assert prepare(*load_scenario(path)).model is not None
