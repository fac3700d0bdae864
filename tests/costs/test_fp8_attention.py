"""FP8 attention (Transformer Engine's FP8 dot-product attention): the forward at cuDNN's measured
FP8 rate, the backward unchanged, and the scenario key's checks."""

from dataclasses import replace

import pytest
import yaml
from click.testing import CliRunner

from scalesim.cli import main
from scalesim.costs.compute import KERNEL_OVERHEAD_S, attention_time_s
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.models.packing import fp8_attention
from scalesim.models.spec import OpSpec

H100 = get_gpu("h100-sxm")


def attention(s, fp8, heads=64, d=128):
    return OpSpec("attention", "attention", 4.0 * s * s * heads * d, 4.0 * s * heads * d,
                  score_elements=float(heads * s * s), causal=False, seq=s, fp8=fp8)


def kernel_s(op, backward=False):
    return attention_time_s(op, H100, "fp8", 1, "flash", backward=backward) - (2 if backward else 1) * KERNEL_OVERHEAD_S


def test_fp8_forward_runs_at_cudnns_fp8_over_bf16_rate():
    # Shah et al. 2024 (FlashAttention-3), H100 SXM5, head dim 128, no mask, 8k tokens:
    # cuDNN 971 TFLOPS in FP8 (Fig. 7), 600 in BF16 (Fig. 5b).
    assert kernel_s(attention(8192, False)) / kernel_s(attention(8192, True)) == pytest.approx(971 / 600, rel=0.01)


def test_fp8_attention_leaves_the_backward_at_the_16_bit_rate():
    assert kernel_s(attention(8192, True), backward=True) == kernel_s(attention(8192, False), backward=True)


def test_fp8_attention_on_blackwell_runs_both_passes_at_cudnns_fp8_rates():
    # NVIDIA/cudnn-frontend's SDPA training benchmark on GB200 (cuDNN 9.22, 64/8 heads, head dim 128,
    # no mask, 8k tokens): forward FP8 2241 / BF16 1771 TFLOPS, backward FP8 1772 / BF16 1404.
    gb200 = get_gpu("gb200")

    def gb200_s(op, backward=False):
        return attention_time_s(op, gb200, "fp8", 1, "flash", backward=backward) - (2 if backward else 1) * KERNEL_OVERHEAD_S
    assert gb200_s(attention(8192, False)) / gb200_s(attention(8192, True)) == pytest.approx(2241 / 1771, rel=0.01)
    assert gb200_s(attention(8192, False), True) / gb200_s(attention(8192, True), True) == pytest.approx(1772 / 1404, rel=0.01)


def test_causal_fp8_attention_on_blackwell_runs_at_cudnns_causal_rates():
    # the same GB200 benchmark's top_left (causal) rows at 8k tokens: forward FP8 2047 / BF16 1574 TFLOPS,
    # backward FP8 1454 / BF16 1332; a causal op gains less than the full-mask rows' 2241 / 1771, 1772 / 1404
    gb200 = get_gpu("gb200")

    def gb200_s(op, backward=False):
        return attention_time_s(op, gb200, "fp8", 1, "flash", backward=backward) - (2 if backward else 1) * KERNEL_OVERHEAD_S
    bf16, fp8 = (replace(attention(8192, fp8), causal=True) for fp8 in (False, True))
    assert gb200_s(bf16) / gb200_s(fp8) == pytest.approx(2047 / 1574, rel=0.01)
    assert gb200_s(bf16, True) / gb200_s(fp8, True) == pytest.approx(1454 / 1332, rel=0.01)


@pytest.mark.parametrize("backward", [False, True])
def test_under_context_parallelism_fp8_attention_gains_what_its_ring_steps_lengths_gain(backward):
    # cp 8 at 8k tokens: one causal 1024-token step and seven unmasked ~724-token ones, all shorter than the
    # GB200 benchmark's shortest row (2k: causal forward 1420 / 1097, backward 831 / 885; unmasked forward
    # 1881 / 1433, backward 1214 / 1124), each an equal share of the work; not the whole sequence's 8k gain
    gb200 = get_gpu("gb200")
    bf16, fp8 = (replace(attention(8192, fp8), causal=True, ring_steps=8) for fp8 in (False, True))
    causal, unmasked = (831 / 885, 1214 / 1124) if backward else (1420 / 1097, 1881 / 1433)
    overhead = (2 if backward else 1) * 8 * KERNEL_OVERHEAD_S
    ratio = ((attention_time_s(bf16, gb200, "fp8", 1, "flash", backward=backward) - overhead)
             / (attention_time_s(fp8, gb200, "fp8", 1, "flash", backward=backward) - overhead))
    assert ratio == pytest.approx(8 / (1 / causal + 7 / unmasked), rel=0.01)


def test_fp8_attention_marks_only_attention_ops():
    model = get_model("llama2-7b", seq_len=1024)
    marked = fp8_attention(model)
    assert [op.fp8 for op in marked.layers[1].ops] == [op.kind == "attention" for op in model.layers[1].ops]
    assert replace(marked.layers[1], ops=model.layers[1].ops) == model.layers[1]


@pytest.mark.parametrize("node,precision", [("dgx-h100", "bf16"), ("l40s-8", "fp8"), ("rtx-pro-6000-8", "fp8"),
                                            ({"gpu": "rtx5090", "gpus": 8}, "fp8")])
def test_fp8_attention_needs_fp8_and_a_published_rate(tmp_path, node, precision):
    data = {"name": "bad", "cluster": {"node": node, "gpus": 8}, "model": "llama2-7b",
            "training": {"precision": precision, "seq_len": 1024, "global_batch": 8, "fp8_attention": True},
            "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "training.fp8_attention" in result.output and "Traceback" not in result.output


def test_fp8_attention_on_sm120_blackwell_is_refused_naming_the_gpus_it_runs_on(tmp_path):
    # cuDNN's FP8 rates are GB200's (sm_100); Transformer Engine runs no FP8 attention on sm_120.
    data = {"name": "bad", "cluster": {"node": "rtx-pro-6000-8", "gpus": 8}, "model": "llama2-7b",
            "training": {"precision": "fp8", "seq_len": 1024, "global_batch": 8, "fp8_attention": True},
            "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    allowed = result.output.split("allowed GPUs:")[1]
    assert result.exit_code == 2 and str(path) in result.output
    assert "gb200" in allowed and "h100-sxm" in allowed and "rtx-pro-6000" not in allowed and "rtx5090" not in allowed


def test_fp8_attention_is_refused_with_a_kernel_that_has_no_fp8_forward(tmp_path):
    data = {"name": "bad", "cluster": {"node": "dgx-h100", "gpus": 8}, "model": "llama2-7b",
            "training": {"precision": "fp8", "seq_len": 1024, "global_batch": 8, "fp8_attention": True,
                         "attention": "flash2"}, "parallel": {"dp": 8}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "training.fp8_attention" in result.output and "flash2" in result.output


def test_fp8_attention_with_the_triton_kernel_is_refused_naming_it():
    import pydantic
    import pytest as _pytest

    from scalesim.scenario import TrainingSpec
    with _pytest.raises(pydantic.ValidationError, match="Triton"):
        TrainingSpec.model_validate({"precision": "fp8", "seq_len": 2048, "global_batch": 8, "micro_batch": 1,
                                     "attention": "triton", "fp8_attention": True})
