"""Flash attention under a causal mask and in backward: the published kernel figures."""

import pytest

from scalesim.costs.compute import KERNEL_OVERHEAD_S, attention_time_s
from scalesim.costs.flash import causal_rate
from scalesim.hardware import get_gpu
from scalesim.models.spec import OpSpec

H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb-sxm")


def attention(s, causal, heads=32, d=128):
    return OpSpec("attention", "attention", 4.0 * s * s * heads * d, 4.0 * s * heads * d,
                  score_elements=float(heads * s * s), causal=causal, seq=s)


def kernel_s(op, gpu, backward=False):
    return attention_time_s(op, gpu, "bf16", 1, "flash2", backward=backward) - (2 if backward else 1) * KERNEL_OVERHEAD_S


def test_causal_flash2_on_h100_runs_at_the_fa3_papers_causal_rate():
    # Shah et al. 2024, Fig. 5 (H100 SXM5, head dim 128, 4k): FlashAttention-2 319 TFLOPS causal,
    # 368 without the mask, each counting the work it does (half the s^2 when causal).
    full, causal = kernel_s(attention(4096, False), H100), kernel_s(attention(4096, True), H100)
    assert (0.5 / causal) / (1 / full) == pytest.approx(319 / 368, abs=0.015)


def test_the_mask_costs_less_of_the_rate_on_longer_sequences():
    rates = [causal_rate("hopper", s) for s in (512, 1024, 2048, 4096, 8192, 16384, 65536)]
    assert rates == sorted(rates) and rates[-1] < 1.0
    ratios = [kernel_s(attention(s, True), H100) / kernel_s(attention(s, False), H100) for s in (1024, 4096, 16384)]
    assert ratios == sorted(ratios, reverse=True) and all(r > 0.5 for r in ratios)


def test_without_a_measured_pair_a_causal_mask_halves_the_work():
    b200 = get_gpu("b200")           # Blackwell: no causal and full-mask pair published here (Ada takes the A100's)
    full, causal = (attention_time_s(attention(4096, mask), b200, "bf16", 1, "flash") for mask in (False, True))
    assert causal - KERNEL_OVERHEAD_S == pytest.approx((full - KERNEL_OVERHEAD_S) / 2)


def test_backward_to_forward_follows_the_masks_rate_too():
    op = attention(8192, True)
    assert kernel_s(op, H100, backward=True) / kernel_s(op, H100) == pytest.approx(2.5 / 0.87)


def triton_s(op, gpu=A100, backward=False):
    return attention_time_s(op, gpu, "bf16", 1, "triton", backward=backward) - (2 if backward else 1) * KERNEL_OVERHEAD_S


@pytest.mark.parametrize("seq, tflops", [(2048, 68), (8192, 78)])
def test_triton_flash_attention_runs_at_the_fa2_papers_triton_rate_on_a100(seq, tflops):
    # Dao 2023, FlashAttention-2, Fig. 4d (A100 80GB SXM4, causal, head dim 128): FlashAttention Triton,
    # forward + backward, counting 3.5x the forward FLOP with half the s^2 under the mask.
    op = attention(seq, True)
    flop = 3.5 * op.flop / 2
    seconds = triton_s(op) + triton_s(op, backward=True)
    assert flop / seconds / 1e12 == pytest.approx(tflops * A100.training_clock_fraction, rel=0.02)


def test_triton_flash_attention_is_slower_than_flash2_and_gains_with_length():
    for s in (1024, 4096, 16384):
        assert triton_s(attention(s, True)) > 2 * kernel_s(attention(s, True), A100)
    per_flop = [triton_s(attention(s, True)) / s ** 2 for s in (512, 2048, 8192, 16384, 65536)]
    assert per_flop == sorted(per_flop, reverse=True)


@pytest.mark.parametrize("seq, causal, a100, h100", [(2048, True, (69, 155), (108, 265)), (8192, False, (82, 201), (137, 335))])
def test_triton_flash_attention_on_h100_gains_what_the_ampere_instruction_kernels_gain(seq, causal, a100, h100):
    # The pre-MLIR Triton emits Ampere's mma.sync on sm_90 too (costs/flash.py). Dao 2023, FlashAttention-2,
    # Figs. 4 and 7 (head dim 128, forward + backward): FlashAttention (v1) and FlashAttention-2 TFLOPS on
    # A100 80GB SXM4 and H100 80GB SXM5; the Triton kernel's H100 rate over its A100 rate is their mean ratio.
    op = attention(seq, causal)
    a100_s, h100_s = (triton_s(op, gpu) + triton_s(op, gpu, backward=True) for gpu in (A100, H100))
    clocks = H100.training_clock_fraction / A100.training_clock_fraction
    expected = (h100[0] / a100[0] + h100[1] / a100[1]) / 2
    assert a100_s / h100_s / clocks == pytest.approx(expected, rel=0.01)


def test_triton_flash_attention_on_h100_is_far_slower_than_the_wgmma_kernels_and_ignores_their_mask_rate():
    for s in (2048, 8192):
        flash2 = kernel_s(attention(s, True), H100) + kernel_s(attention(s, True), H100, backward=True)
        assert triton_s(attention(s, True), H100) + triton_s(attention(s, True), H100, backward=True) > 2 * flash2
    # its rates are forward + backward by mask: backward is 2.5x the forward, the mask halves the work at 16k
    op_c, op_f = attention(16384, True), attention(16384, False)
    assert triton_s(op_c, H100, backward=True) / triton_s(op_c, H100) == pytest.approx(2.5)
    # 16k, Figs. 4 and 7: Triton on A100 95 full-mask / 80 causal; v1 and FlashAttention-2 A100 -> H100 gains
    full_gain, causal_gain = (139 / 83 + 338 / 203) / 2, (137 / 83 + 328 / 189) / 2
    assert triton_s(op_c, H100) / triton_s(op_f, H100) == pytest.approx(0.5 * (95 * full_gain) / (80 * causal_gain), rel=0.01)


def test_triton_flash_attention_outside_ampere_and_hopper_is_refused_naming_the_key(tmp_path):
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from scalesim.cli import main
    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "scenarios" / "8x4090-ddp.yaml").read_text())
    data["training"]["attention"] = "triton"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(path), "--no-plots"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "training.attention" in result.output and "triton" in result.output


def test_flash2_on_a100_is_slower_on_short_causal_sequences_as_the_fa2_paper_measures():
    # Dao 2023, Fig. 4d (A100, causal, head dim 128): FlashAttention-2 forward + backward 155 TFLOPS at
    # 2k against 189 at 16k; per FLOP the 2k kernel is that much slower.
    per_flop = {s: (kernel_s(attention(s, True), A100) + kernel_s(attention(s, True), A100, backward=True))
                / attention(s, True).flop for s in (2048, 16384)}
    assert per_flop[16384] / per_flop[2048] == pytest.approx(155 / 189, rel=0.01)


def test_flash_on_ada_is_slower_on_short_causal_sequences_as_the_same_kernels_on_a100():
    # Ada runs FlashAttention-2's sm_80 kernels: the rate by length of Dao 2023, Fig. 4d (A100, causal),
    # 133 TFLOPS at 1k against 189 at 16k, holds relative to Ada's own rate (small12).
    rtx4090 = get_gpu("rtx4090")
    for kind in ("flash", "flash2"):
        per_flop = {s: (attention_time_s(attention(s, True), rtx4090, "bf16", 1, kind)
                        + attention_time_s(attention(s, True), rtx4090, "bf16", 1, kind, backward=True)
                        - 3 * KERNEL_OVERHEAD_S) / attention(s, True).flop for s in (1024, 16384)}
        assert per_flop[16384] / per_flop[1024] == pytest.approx(133 / 189, rel=0.01)
