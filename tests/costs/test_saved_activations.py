"""What a block keeps for backward by the framework's model code (training.saved_activations)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim.costs.memory import layers_activation_bytes, with_saved_activations
from scalesim.models.spec import ModelSpec
from scalesim.models.transformer import transformer_block
from scalesim.parallel.sharding import shard_layer


def llama(s: int, h: int, f: int, heads: int, kv_heads: int) -> ModelSpec:
    block = transformer_block("b", s=s, h=h, heads=heads, kv_heads=kv_heads, f=f, ffn="swiglu",
                              bias=False, norm="rmsnorm", rotary=True)
    return ModelSpec("llama", "inline", (block,), s, 0.0, hidden=h, num_layers=1, heads=heads, kv_heads=kv_heads)


def test_nanotron_llama_block_keeps_20sh_plus_8sf():
    # Read from nanotron's llama.py @67c5ebb6 (no GQA): two norm inputs 4sh, the QKV input 2sh, the
    # permuted q, k, v copy 6sh, the k, v copy for rotary 4sh, the attention output 2sh, the gate/up
    # input 2sh; gate and up 4sf, the SiLU output 2sf, their product 2sf. No dropout masks.
    s, h, f = 64, 32, 96
    block = with_saved_activations(llama(s, h, f, 4, 4), "nanotron").layers[0]
    assert block.activation_bytes == 20 * s * h + 8 * s * f


def test_grouped_query_attention_holds_k_and_v_once():
    s, h, f = 64, 32, 96
    mha = with_saved_activations(llama(s, h, f, 4, 4), "nanotron").layers[0].activation_bytes
    gqa = with_saved_activations(llama(s, h, f, 4, 1), "nanotron").layers[0].activation_bytes
    kv_dim = h // 4
    # GQA drops 3 of 4 kv heads from q/k/v storage and does not hold k, v twice.
    assert mha - gqa == 2 * 2 * s * (h - kv_dim) + 2 * 2 * s * h


def test_megatron_style_leaves_the_model_unchanged():
    model = llama(64, 32, 96, 4, 4)
    assert with_saved_activations(model, "megatron") is model


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_fewer_tensor_parallel_gpus_never_hold_less(tp_a, tp_b, sp):
    small, large = sorted((tp_a, tp_b))
    model = with_saved_activations(llama(256, 128, 384, 8, 8), "nanotron")

    def held(tp: int) -> float:
        return layers_activation_bytes([shard_layer(model.layers[0], tp, 1, sp)], 1, "bf16", "none", True,
                                       2.0 * 256 * 128 / (tp if sp else 1))
    assert held(small) >= held(large)
