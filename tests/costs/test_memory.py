"""Memory model: the published per-parameter and per-activation accounting."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalesim.costs.memory import (MEMORY_MODEL_ERROR_FRACTION, activation_bytes, fit_confidence, loss_peak_bytes,
                                   memory_per_gpu, state_bytes_per_param)
from scalesim.models import get_model


def test_mixed_precision_adam_holds_16_bytes_per_parameter():
    # ZeRO (Rajbhandari et al. 2020) sec. 3.1: 2 + 2 + 12 bytes per parameter.
    assert sum(state_bytes_per_param("bf16", "adamw")) == 16


def test_fp32_adam_holds_weights_grads_and_two_moments():
    assert sum(state_bytes_per_param("fp32", "adamw")) == 16


def test_gpt2_block_activations_follow_korthikanti():
    model = get_model("gpt2-350m", seq_len=1024)
    s, h, a = 1024, model.hidden, model.heads
    block = next(layer for layer in model.layers if layer.kind == "transformer_block")
    assert block.activation_bytes + block.attention_score_bytes == s * h * (34 + 5 * a * s / h)


def test_flash_attention_drops_the_score_matrices():
    model = get_model("gpt2-124m", seq_len=1024)
    naive = activation_bytes(model, 1, "bf16", "none", flash_attention=False)
    flash = activation_bytes(model, 1, "bf16", "none", flash_attention=True)
    scores = sum(layer.attention_score_bytes for layer in model.layers)
    assert naive - flash == pytest.approx(scores)


def test_full_recompute_keeps_only_block_inputs_plus_one_block():
    model = get_model("gpt2-350m", seq_len=1024)
    blocks = [l for l in model.layers if l.kind == "transformer_block"]
    rest = sum(l.activation_bytes for l in model.layers if l.kind != "transformer_block")
    full = activation_bytes(model, 2, "bf16", "full", flash_attention=True)
    # the loss peaks at the end of forward, before any block is recomputed: the larger one counts
    loss = loss_peak_bytes(model.layers, 2)
    expected = 2 * (2 * 1024 * model.hidden * len(blocks) + rest) + max(2 * blocks[0].activation_bytes, loss)
    assert full == pytest.approx(expected)


def test_activations_grow_linearly_with_micro_batch():
    model = get_model("gpt2-124m", seq_len=512)
    one = activation_bytes(model, 1, "bf16", "none", True)
    assert activation_bytes(model, 8, "bf16", "none", True) == pytest.approx(8 * one)


def test_ddp_buckets_add_one_gradient_copy():
    model = get_model("gpt2-124m", seq_len=1024)
    kwargs = dict(micro_batch=1, precision="bf16", optimizer="adamw", checkpointing="none")
    with_buckets = memory_per_gpu(model, ddp_buckets=True, **kwargs)
    without = memory_per_gpu(model, ddp_buckets=False, **kwargs)
    assert with_buckets.grad_buckets == model.params * 2
    assert with_buckets.total > without.total


VERDICTS = ("does_not_fit", "tight", "fits")


@given(need=st.floats(1e6, 1e12), capacity=st.floats(1e6, 1e12), more=st.floats(1.0, 10.0))
def test_more_free_memory_never_turns_a_fit_into_a_non_fit(need, capacity, more):
    before = VERDICTS.index(fit_confidence(need, capacity))
    after = VERDICTS.index(fit_confidence(need, capacity * more))
    assert after >= before


@given(need=st.floats(1e6, 1e12), capacity=st.floats(1e6, 1e12))
def test_the_band_is_tight_exactly_near_the_capacity(need, capacity):
    band = MEMORY_MODEL_ERROR_FRACTION
    verdict = fit_confidence(need, capacity)
    if need <= capacity / (1 + band) * 0.99:
        assert verdict == "fits"
    if need >= capacity / (1 - band) * 1.01:
        assert verdict == "does_not_fit"
    if abs(need - capacity) <= 0.01 * capacity:
        assert verdict == "tight"


def test_zero1_with_fp32_gradient_reduction_holds_megatrons_6_plus_12_over_d_bytes():
    # Megatron Core docs, Distributed Optimizer: "bf16 parameters, fp32 gradients: 6 + 12/d" bytes per parameter.
    from scalesim.costs.memory import training_memory
    model = get_model("gpt2-124m", seq_len=1024)
    d = 8
    m = training_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                        checkpointing="full", flash_attention=True, boundary_bytes_per_sample=0.0,
                        zero=1, shards=d, grad_reduce_bytes=4)
    params = sum(layer.params for layer in model.layers)
    assert m.weights + m.gradients + m.optimizer == pytest.approx(params * (6 + 12 / d))


def _nanotron_state(shards: int, fp32_accumulation: bool) -> float:
    from scalesim.costs.memory import training_memory
    model = get_model("gpt2-124m", seq_len=1024)
    m = training_memory(model.layers, micro_batch=1, in_flight=1, precision="bf16", optimizer="adamw",
                        checkpointing="full", flash_attention=True, boundary_bytes_per_sample=0.0,
                        zero=0, shards=shards, grad_reduce_bytes=4, fp32_accumulation=fp32_accumulation)
    return m.weights + m.gradients + m.optimizer + m.grad_buckets


def test_fp32_gradient_accumulation_keeps_fp32_gradients_on_a_single_replica():
    # nanotron's FP32GradientAccumulator (optim/gradient_accumulator.py): an fp32 gradient buffer for every
    # parameter, with or without DDP; the bf16 .grad is freed after each add. One replica: 2 + 4 + 12 bytes.
    params = sum(layer.params for layer in get_model("gpt2-124m", seq_len=1024).layers)
    assert _nanotron_state(1, True) == pytest.approx(params * 18)
    assert _nanotron_state(1, True) > _nanotron_state(1, False)
    # With DDP the fp32 buffer was already counted (16-bit buckets beside it): nothing changes there.
    assert _nanotron_state(8, True) == pytest.approx(_nanotron_state(8, False))
    # Adding data-parallel replicas without ZeRO never needs less state memory per GPU.
    assert _nanotron_state(8, True) >= _nanotron_state(1, True)


def test_a_compiled_loss_peaks_lower_than_the_eager_one():
    # apple/ml-cross-entropy README benchmark (A100, 8192 x 256000 = 2^31 logits): forward+backward 16000 MB under
    # torch.compile against 28000 MB eager, i.e. 12000 MiB / 2^31 logits = 6 bytes a logit less.
    from scalesim.models.transformer import lm_head
    head = lm_head(4, 8, 100, tied=False)
    eager, compiled = (loss_peak_bytes([head], 2, kind) for kind in ("eager", "compiled"))
    measured_saving_per_logit = (28000 - 16000) * 2**20 / (8192 * 256000)
    assert eager - compiled == pytest.approx(2 * 4 * 100 * measured_saving_per_logit, rel=0.03)


def test_the_allocator_reserves_the_live_tensors_and_its_slack_but_not_the_cuda_context():
    # torch.cuda.max_memory_reserved counts the caching allocator's segments: at least every live
    # tensor, never the CUDA context or NCCL's own buffers, which the need (total) includes.
    from scalesim.costs.memory import FRAMEWORK_OVERHEAD_BYTES
    m = memory_per_gpu(get_model("gpt2-350m", seq_len=1024), micro_batch=4, precision="bf16", optimizer="adam",
                       checkpointing="none", ddp_buckets=True)
    live = m.weights + m.gradients + m.optimizer + m.grad_buckets + m.activations
    assert live <= m.reserved <= m.total - FRAMEWORK_OVERHEAD_BYTES + 1e-6


def test_rank_0_reports_the_first_pipeline_stage_not_the_most_loaded_one():
    # nanotron's 1.34b dp128 tp2 pp2 run: one micro-batch per step, so the last stage's head and loss
    # outweigh the first stage's extra in-flight activations; rank 0 (the figure nanotron logs) is stage 0.
    from scalesim.app.setup import prepare
    from scalesim.app.validate import cases_file
    from scalesim.scenario import load_scenario

    path = cases_file().parent / "scenarios" / "nanotron-1.34b-64node-dp128-tp2-pp2.yaml"
    step = prepare(*load_scenario(path)).step
    first = step.first_stage_memory
    assert first.total < step.memory.total
    assert first.weights > 0 and step.stages[0].in_flight >= step.stages[-1].in_flight


def test_transformer_engine_fp8_linears_keep_fp8_inputs():
    """TE's fp8 linears keep 1-byte (+ MXFP8 scale) copies of their inputs: a block keeps less than
    Korthikanti's 16-bit count under fp8, and exactly that count in bf16."""
    from scalesim.costs.memory import with_saved_activations
    from scalesim.models import get_model

    model = get_model("qwen3-30b-a3b", seq_len=4096)
    fp8 = with_saved_activations(model, "transformer-engine", "fp8")
    bf16 = with_saved_activations(model, "transformer-engine", "bf16")
    s, h, k, f = 4096, 2048, 8, 768
    # inputs of QKV (h), the projection (32 heads x 128), the experts' fc1 (k copies of h) and fc2 (k x f)
    inputs = s * (h + 32 * 128 + k * h + k * f)
    for m, t, b in zip(model.layers, fp8.layers, bf16.layers):
        assert b.activation_bytes == m.activation_bytes
        if m.kind == "transformer_block":
            assert inputs * 0.9 < m.activation_bytes - t.activation_bytes < inputs


def test_freed_16bit_logits_stay_reserved_through_an_eager_loss_backward():
    # torchtitan (`del pred` before `loss.backward()`) frees the 16-bit logits once their fp32 copy exists;
    # every request at the loss's backward peak is a whole fp32 logit tensor, twice their size, so the
    # caching allocator cannot reuse their block: max_memory_reserved keeps 2 bytes a logit beyond the live
    # peak, and the need (what decides a fit) does not count it.
    from scalesim.costs.memory import FRAGMENTATION, FRAMEWORK_OVERHEAD_BYTES, model_boundary_bytes, training_memory
    model = get_model("gpt2-124m", seq_len=1024)
    logits = 4 * 1024 * model.vocab
    kinds = {}
    for kind in ("eager", "fused", "compiled"):
        m = training_memory(model.layers, micro_batch=4, in_flight=1, precision="bf16", optimizer="adam",
                            checkpointing="full", flash_attention=True,
                            boundary_bytes_per_sample=model_boundary_bytes(model), cross_entropy=kind)
        kinds[kind] = m
        assert m.total == pytest.approx(m.live + FRAMEWORK_OVERHEAD_BYTES + FRAGMENTATION * m.live)
    assert kinds["eager"].reserved - kinds["eager"].live * (1 + FRAGMENTATION) == pytest.approx(2 * logits)
    assert kinds["fused"].reserved == pytest.approx(kinds["fused"].live * (1 + FRAGMENTATION))  # logits kept live
    assert kinds["compiled"].reserved == pytest.approx(kinds["compiled"].live * (1 + FRAGMENTATION))
    # fp32 training: `.float()` returns the logits themselves, nothing is freed early
    fp32 = training_memory(model.layers, micro_batch=4, in_flight=1, precision="fp32", optimizer="adam",
                           checkpointing="full", flash_attention=False,
                           boundary_bytes_per_sample=model_boundary_bytes(model), cross_entropy="eager")
    assert fp32.reserved == pytest.approx(fp32.live * (1 + FRAGMENTATION))


def test_a_larger_recompute_peak_reuses_the_freed_logits_block():
    # When a recomputed block needs more than the loss does (with the freed block), the block serves it:
    # nothing stays reserved beyond the live peak.
    from scalesim.costs.memory import activation_peaks
    from scalesim.models.transformer import lm_head
    head = lm_head(4, 8, 100, tied=False)
    small = activation_peaks([head], 1, "bf16", "full", True, 8.0, cross_entropy="eager")
    assert small[1] == pytest.approx(2 * 4 * 100)
    model = get_model("gpt2-124m", seq_len=1024)
    block = next(layer for layer in model.layers if layer.kind == "transformer_block")
    live, cached = activation_peaks([block, head], 1, "bf16", "full", True, 2.0 * 1024 * 768, cross_entropy="eager")
    assert cached == 0.0 and live > 0
