"""MLA's latent all-gathers and reduce-scatters under tensor and sequence parallelism (parallel/mla_tp.py)."""

from pathlib import Path

from scalesim.app.setup import prepare
from scalesim.models.zoo import get_model
from scalesim.parallel import mla_tp
from scalesim.parallel.sharding import shard_layer
from scalesim.program import CollectiveTask
from scalesim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
GB200 = ROOT / "validation" / "scenarios" / "dgxc-deepseek-v3-bf16-128xgb200.yaml"


def _tp_calls(changes):
    s, file = load_scenario(GB200)
    setup = prepare(s.with_changes(training={"global_batch": 32}, parallel=changes), file)
    rank = min(setup.step.program.tasks)
    return sum(1 for t in setup.step.program.tasks[rank] if isinstance(t, CollectiveTask) and t.name.startswith("tp"))


def test_each_mla_block_exchanges_its_own_tensors_each_pass(monkeypatch):
    s, _ = load_scenario(GB200)
    blocks = s.parallel.decoder_first_pipeline_num_layers      # rank 0's stage: all MLA blocks
    micro_batches = 32 // s.parallel.dp
    with_latents = _tp_calls({})
    monkeypatch.setattr(mla_tp, "latent_calls", lambda *args: [])
    assert with_latents - _tp_calls({}) == 2 * mla_tp.CALLS_PER_PASS * blocks * micro_batches


def test_duplicated_down_projections_exchange_no_latents():
    # Megatron-Core before 24 Feb and since 13 Jun 2025 (TELinear): each TP rank projects down whole.
    blocks = load_scenario(GB200)[0].parallel.decoder_first_pipeline_num_layers
    assert _tp_calls({}) - _tp_calls({"mla_down_proj": "duplicated"}) == 2 * mla_tp.CALLS_PER_PASS * blocks * 32 // 16


def test_the_down_projections_default_to_megatron_cores_current_duplicated_ones():
    s, _ = load_scenario(ROOT / "validation" / "scenarios" / "mbridge-deepseek-v3-bf16-256xgb200.yaml")
    assert s.parallel.mla_down_proj == "duplicated"


def test_no_latent_exchange_without_sequence_parallelism(monkeypatch):
    plain = _tp_calls({"sequence_parallel": False})
    monkeypatch.setattr(mla_tp, "latent_calls", lambda *args: [("all_gather", 1.0)])
    assert _tp_calls({"sequence_parallel": False}) == plain


def test_none_in_the_recompute_pass_nor_for_blocks_without_mla():
    mla = shard_layer(get_model("deepseek-v3", seq_len=1024).layers[1], 2, 1, True)
    dense = shard_layer(get_model("llama3-8b", seq_len=1024).layers[1], 2, 1, True)
    assert mla_tp.latent_calls(mla, 1, 2, "recompute") == [] == mla_tp.latent_calls(dense, 1, 2, "forward")


def test_one_call_a_pass_moves_the_blocks_input_and_the_others_latents_far_smaller():
    block = shard_layer(get_model("deepseek-v3", seq_len=1024).layers[1], 2, 1, True)
    hidden_bytes = 1024 * 7168 * 2
    for kind in ("forward", "backward"):
        sizes = sorted(size for _, size in mla_tp.latent_calls(block, 1, 2, kind))
        assert len(sizes) == mla_tp.CALLS_PER_PASS and sizes[-1] == hidden_bytes and sizes[-2] < hidden_bytes / 4


def test_full_recomputation_replays_every_latent_exchange(monkeypatch):
    # Megatron's full recompute re-runs each block's whole forward, MLA's latent gathers and scatters with it
    s, file = load_scenario(GB200)
    blocks = s.parallel.decoder_first_pipeline_num_layers      # rank 0's stage: all MLA blocks
    micro_batches = 32 // s.parallel.dp
    full = s.with_changes(training={"global_batch": 32, "activation_checkpointing": "full", "recompute_modules": None})

    def calls():
        setup = prepare(full, file)
        rank = min(setup.step.program.tasks)
        return sum(1 for t in setup.step.program.tasks[rank] if isinstance(t, CollectiveTask) and t.name.startswith("tp"))
    with_latents = calls()
    monkeypatch.setattr(mla_tp, "latent_calls", lambda *args: [])
    assert with_latents - calls() == 3 * mla_tp.CALLS_PER_PASS * blocks * micro_batches    # forward, again, backward
