"""Serving models with sliding windows (models/windows.py): vLLM's V1 KV cache manager frees the blocks a
window has left behind, and a windowed layer's attention reads only its window."""

import json

import pytest

import scalesim.models.zoo as zoo
from scalesim.app.serve import IterationTimer, prepare_serving, serve
from scalesim.serving.scheduler import BLOCK_TOKENS, Scheduler, blocks_for, window_blocks
from scalesim.serving.spec import ServingScenario
from scalesim.serving.workload import Request

LONG = {
    "name": "1x H100, Mistral 7B v0.1, long prompts",
    "cluster": {"node": "dgx-h100", "gpus": 1},
    "model": "mistral-7b",
    "serving": {"tp": 1, "weights": "bf16", "max_batch_tokens": 8192, "max_seqs": 256,
                "requests": {"concurrency": 64, "count": 96, "prompt_tokens": 12000, "output_tokens": 64, "seed": 1},
                "slo": {"ttft_s": 60.0, "tpot_s": 1.0}},
}


def _scenario(model="mistral-7b", **requests) -> ServingScenario:
    data = json.loads(json.dumps(LONG))
    data["model"] = model
    data["serving"]["requests"].update(requests)
    return ServingScenario.model_validate(data)


@pytest.fixture
def no_windows(monkeypatch):
    """Run a function with the zoo's sliding windows taken away."""
    def run(function, *args, **kwargs):
        monkeypatch.setattr(zoo, "SLIDING_WINDOWS", {})
        zoo._build_zoo.cache_clear()
        try:
            return function(*args, **kwargs)
        finally:
            monkeypatch.undo()
            zoo._build_zoo.cache_clear()
    return run


def test_a_windowed_sequence_holds_its_window_and_never_more_than_the_whole_context():
    for tokens in (1, 100, 4096, 4097, 9000, 50000):
        for share in (0.0, 0.5, 1.0):
            held = window_blocks(tokens, tokens - 1, 4096, share)
            assert held <= blocks_for(tokens)
            if tokens <= 4096 or share == 0.0:
                assert held == blocks_for(tokens)
    # every layer windowed: the window's keys and the block being written, however long the context
    assert {window_blocks(t, t - 1, 4096, 1.0) for t in range(8192, 60000, 997)} <= {4096 // BLOCK_TOKENS,
                                                                                     4096 // BLOCK_TOKENS + 1}
    assert window_blocks(50000, 49999, 4096, 0.5) < blocks_for(50000) * 0.6    # Gemma 2: half its layers


def test_the_scheduler_frees_what_the_window_leaves_behind():
    windowed = Scheduler(total_blocks=10_000, max_batch_tokens=4096, max_seqs=4, window=1024, windowed=1.0)
    plain = Scheduler(total_blocks=10_000, max_batch_tokens=4096, max_seqs=4)
    for s in (windowed, plain):
        s.add(Request(0, 0.0, 8192, 4), 0.0)
        now = 0.0
        while s.running or s.waiting:
            batch = s.schedule()
            now += 1.0
            s.complete(batch, now)
            assert s.used_blocks == sum(q.blocks for q in s.running)
    # at most a prefill chunk's slots and the window before it (vLLM allocates the chunk, then frees)
    assert windowed.peak_blocks <= (4096 + 1024) // BLOCK_TOKENS + 1 < plain.peak_blocks
    assert windowed.used_blocks == plain.used_blocks == 0


def test_long_prompts_run_faster_with_the_window_than_without(no_windows):
    sc = _scenario()
    windowed, plain = serve(sc, search=False), no_windows(serve, sc, search=False)
    assert windowed["output_tokens_per_s"] > plain["output_tokens_per_s"]
    decode = [(1, 12000, True)] * 32
    assert IterationTimer(prepare_serving(sc)).of_entries(decode) < \
        no_windows(lambda: IterationTimer(prepare_serving(sc)).of_entries(decode))


def test_requests_no_longer_than_the_window_serve_exactly_as_without(no_windows):
    sc = _scenario(prompt_tokens=3000, output_tokens=64)
    assert serve(sc, search=False) == no_windows(serve, sc, search=False)
