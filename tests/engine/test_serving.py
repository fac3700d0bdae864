"""The serving engine's timelines with a hand-computable iteration time."""

import pytest

from scalesim.engine.serving import simulate_serving
from scalesim.serving.scheduler import Scheduler
from scalesim.serving.workload import Request


def schedulers(n: int, blocks: int = 1000):
    return [Scheduler(blocks, max_batch_tokens=256, max_seqs=64) for _ in range(n)]


def per_token(batch) -> float:
    """1 ms per iteration plus 1 us per token: easy to follow by hand."""
    return 1e-3 + 1e-6 * batch.tokens


def test_one_request_alone():
    run = simulate_serving([Request(0, 0.5, prompt_tokens=100, output_tokens=3)], schedulers(1), per_token)
    (rec,) = run.records
    # Prefill iteration of 100 tokens, then two decode iterations of one token.
    assert rec.first_token_s == pytest.approx(0.5 + 1e-3 + 100e-6, abs=1e-12)
    assert rec.finish_s == pytest.approx(rec.first_token_s + 2 * (1e-3 + 1e-6), abs=1e-12)
    assert run.iterations == 3


def test_round_robin_alternates_replicas():
    requests = [Request(i, 0.001 * i, 10, 2) for i in range(6)]
    run = simulate_serving(requests, scheds := schedulers(2), per_token, router="round-robin")
    assert len(run.records) == 6
    assert run.busy_s[0] > 0 and run.busy_s[1] > 0
    assert scheds[0].outstanding == scheds[1].outstanding == 0


def test_a_closed_loop_keeps_at_most_its_clients_in_flight():
    requests = [Request(i, None, 10, 5) for i in range(20)]
    seen = []

    def watch(batch):
        seen.append(len(batch.entries))
        return per_token(batch)

    run = simulate_serving(requests, schedulers(1), watch, concurrency=4)
    assert len(run.records) == 20 and max(seen) <= 4


def test_the_same_inputs_give_the_same_run():
    requests = [Request(i, 0.0003 * i, 30 + i, 4 + i % 3) for i in range(40)]
    a = simulate_serving(requests, schedulers(3), per_token)
    b = simulate_serving(requests, schedulers(3), per_token)
    assert a == b
