"""torch.compile of model code with a complex-valued RoPE (torchtitan): only the RoPE runs eager."""

from scalesim.app.setup import prepare
from scalesim.scenario import load_scenario


def test_compiled_complex_rope_is_a_scenario_choice(tmp_path):
    text = ("name: t\ncluster: {node: dgx-h100}\nmodel: llama3-8b\ntraining: {precision: bf16, seq_len: 2048, "
            "global_batch: 8, micro_batch: 1, elementwise_kernels: %s}\nparallel: {dp: 8}\n")
    ropes = {}
    for kind in ("fused", "compiled-complex-rope"):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(text % kind)
        setup = prepare(*load_scenario(path))
        ropes[kind] = [op.name for op in setup.model.layers[1].ops].count("rope")
    assert ropes == {"fused": 1, "compiled-complex-rope": 6}
