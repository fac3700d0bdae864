"""Per-op selective checkpointing (torchtitan's `selective_ac_option = "op"`) and the loss's memory peak."""

import pytest

from scalesim.costs.compute import layer_time
from scalesim.costs.loss_memory import CROSS_ENTROPY_PEAK_BYTES, loss_peak_bytes
from scalesim.costs.memory import activation_bytes
from scalesim.costs.recompute import recomputed_kernels, recomputed_shares, saved_bytes_per_sample
from scalesim.hardware import get_gpu
from scalesim.models import get_model
from scalesim.models.transformer import lm_head, transformer_block
from scalesim.parallel.sharding import shard_layer

S, H, KV, F = 2048, 4096, 1024, 14336          # a Llama 3 8B block (8 KV heads of 128)


def llama_block():
    return transformer_block("b", s=S, h=H, heads=32, kv_heads=8, f=F, ffn="swiglu", bias=False,
                             norm="rmsnorm", rotary=True)


def test_every_second_mm_is_recomputed_in_torchtitans_call_order():
    # wq, wk, wv, wo, w1, w3, w2: wk, wo and w3 (the 2nd, 4th and 6th mm) re-run; attention is saved;
    # norms, rope, SwiGLU and residual adds are recomputed.
    block = llama_block()
    shares = dict(zip((op.name for op in block.ops), recomputed_shares(block)))
    assert shares["qkv"] == pytest.approx(KV / (H + 2 * KV))
    assert (shares["attn_out"], shares["mlp_up"]) == (1.0, 1.0)
    assert (shares["mlp_gate"], shares["mlp_down"], shares["attention"]) == (0.0, 0.0, 0.0)
    assert all(shares[n] == 1.0 for n in ("norm_attn", "norm_mlp", "rope", "swiglu", "residual_mlp"))
    assert recomputed_kernels(block) == 3 + sum(1 for op in block.ops if op.kind not in ("gemm", "attention"))


def test_a_llama_block_keeps_its_input_and_the_odd_mm_and_attention_outputs():
    # input 2sh, q 2sh, v 2s*kv, attention output 2sh, w1 2sf, w2 2sh (16-bit)
    assert saved_bytes_per_sample(llama_block(), 2 * S * H) == pytest.approx(S * (8 * H + 2 * KV + 2 * F))


def test_per_op_checkpointing_recomputes_more_than_selective_and_less_than_full():
    block, gpu = llama_block(), get_gpu("h100-sxm")
    times = {mode: layer_time(block, gpu, "bf16", 1, mode).recompute_s
             for mode in ("none", "selective", "selective-op", "full")}
    assert times["none"] == 0 < times["selective-op"] < times["full"]
    # with flash attention Megatron's selective re-runs only the attention core, which per-op saves
    assert times["selective"] > 0


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_per_op_checkpointing_needs_less_memory_than_none_and_more_than_full(micro_batch):
    model = get_model("llama3-8b", seq_len=4096)
    need = {mode: activation_bytes(model, micro_batch, "bf16", mode, flash_attention=True)
            for mode in ("none", "selective-op", "full")}
    assert need["full"] < need["selective-op"] < need["none"]


def test_tensor_parallel_splits_what_a_block_keeps():
    block = llama_block()
    whole = saved_bytes_per_sample(block, 2 * S * H)
    split = saved_bytes_per_sample(shard_layer(block, 4, 1, True), 2 * S * H / 4)
    assert split < whole


def test_the_eager_loss_peaks_higher_than_a_fused_kernel_and_only_where_the_head_is():
    head = lm_head(S, H, 128256, tied=False)
    peaks = [loss_peak_bytes([head], 2, kind) for kind in ("fused", "fp32-upcast", "eager")]
    assert 0 < peaks[0] < peaks[1] < peaks[2]
    assert peaks[2] == pytest.approx(2 * S * 128256 * (CROSS_ENTROPY_PEAK_BYTES["eager"] - 4))
    assert loss_peak_bytes([llama_block()], 2, "eager") == 0.0
    # vocabulary-parallel heads hold 1/tp of the logits each
    assert loss_peak_bytes([shard_layer(head, 4, 1, True)], 2, "eager") == pytest.approx(peaks[2] / 4)


def test_loss_parallel_and_hugging_face_losses_hold_an_fp32_logits_copy_more_than_the_eager_loss():
    # torch's loss_parallel backward builds zeros_like(x), exp(x) and their sum beside the kept log-softmax
    # output where the eager one holds two gradients; Hugging Face's causal-LM output keeps its fp32 logits.
    head = lm_head(S, H, 128256, tied=False)
    eager = loss_peak_bytes([head], 2, "eager")
    fp32_logits = 2 * S * 128256 * 4
    for kind in ("loss-parallel", "hf-causal-lm"):
        assert loss_peak_bytes([head], 2, kind) == pytest.approx(eager + fp32_logits)


def test_compiled_per_op_checkpointing_keeps_only_outputs_backward_reads():
    # Eager SAC stores every MUST_SAVE output (torchtitan's odd mm calls: wq, wv, w1, w2); under
    # torch.compile the partitioner keeps what the backward graph reads, and nothing reads w2's output
    # (it only feeds the residual add). What is recomputed does not change.
    from scalesim.costs.recompute import compiled_saves, recomputed_shares, saved_bytes_per_sample
    from scalesim.models import get_model
    model = get_model("llama3-8b", seq_len=2048)
    compiled = compiled_saves(model)
    for eager_layer, compiled_layer in zip(model.layers, compiled.layers):
        if eager_layer.kind != "transformer_block":
            assert compiled_layer == eager_layer
            continue
        w2 = next(op for op in eager_layer.ops if op.name == "mlp_down")
        m, n, _ = w2.gemm_mnk
        eager_kept = saved_bytes_per_sample(eager_layer, 0.0)
        assert eager_kept - saved_bytes_per_sample(compiled_layer, 0.0) == 2.0 * m * n
        assert recomputed_shares(compiled_layer) == recomputed_shares(eager_layer)
