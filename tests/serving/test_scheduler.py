"""The batching policy on its own: chunked prefill, token budgets, KV blocks and preemption."""

from scalesim.serving.scheduler import Scheduler, blocks_for
from scalesim.serving.workload import Request


def run_to_end(scheduler: Scheduler, step_s: float = 1.0, limit: int = 10_000):
    """Iterate with a constant iteration time until nothing is left; returns the batches and finished."""
    now, batches, finished = 0.0, [], []
    while (batch := scheduler.schedule()) is not None and len(batches) < limit:
        now += step_s
        batches.append(batch)
        finished += scheduler.complete(batch, now)
    return batches, finished


def test_a_long_prompt_is_prefilled_in_chunks_within_the_token_budget():
    s = Scheduler(total_blocks=100, max_batch_tokens=64, max_seqs=8)
    s.add(Request(0, 0.0, prompt_tokens=150, output_tokens=3), 0.0)
    batches, finished = run_to_end(s)
    # 64 + 64 + 22 prompt tokens, the last chunk samples the first token, then two decode steps.
    assert [b.entries for b in batches] == [((64, 64, False),), ((64, 128, False),), ((22, 150, True),),
                                            ((1, 151, True),), ((1, 152, True),)]
    assert finished[0].first_token_s == 3.0 and finished[0].finish_s == 5.0


def test_decodes_go_first_and_new_prompts_fill_the_rest_of_the_budget():
    s = Scheduler(total_blocks=100, max_batch_tokens=16, max_seqs=8)
    s.add(Request(0, 0.0, 10, 4), 0.0)
    s.complete(s.schedule(), 1.0)                 # request 0 prefilled, now decoding
    s.add(Request(1, 0.0, 40, 2), 1.0)
    batch = s.schedule()
    assert batch.entries == ((1, 11, True), (15, 15, False))
    assert batch.tokens <= 16


def test_max_seqs_caps_the_running_sequences():
    s = Scheduler(total_blocks=1000, max_batch_tokens=1000, max_seqs=3)
    for i in range(5):
        s.add(Request(i, 0.0, 4, 10), 0.0)
    assert len(s.schedule().entries) == 3 and len(s.running) == 3 and len(s.waiting) == 2


def test_every_request_finishes_with_its_tokens_and_every_block_comes_back():
    s = Scheduler(total_blocks=12, max_batch_tokens=32, max_seqs=16)
    requests = [Request(i, 0.0, 20 + 7 * i, 5 + 3 * i) for i in range(6)]
    for r in requests:
        s.add(r, 0.0)
    _, finished = run_to_end(s)
    assert sorted(seq.request.id for seq in finished) == list(range(6))
    assert all(seq.generated == seq.request.output_tokens for seq in finished)
    assert s.used_blocks == 0 and s.peak_blocks <= 12


def test_running_out_of_blocks_preempts_the_newest_and_it_recomputes():
    # 3 blocks of 16 tokens; two requests of 16 prompt tokens each need a second block to decode.
    s = Scheduler(total_blocks=3, max_batch_tokens=64, max_seqs=4)
    s.add(Request(0, 0.0, 16, 8), 0.0)
    s.add(Request(1, 0.0, 16, 8), 0.0)
    _, finished = run_to_end(s)
    assert s.preemptions >= 1
    newest = next(seq for seq in finished if seq.request.id == 1)
    assert newest.preemptions >= 1 and newest.generated == 8
    assert [seq.request.id for seq in finished] == [0, 1]
    assert s.used_blocks == 0


def test_blocks_round_up():
    assert [blocks_for(t) for t in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]


def test_guaranteed_admission_reserves_the_whole_output_and_never_preempts():
    s = Scheduler(total_blocks=3, max_batch_tokens=64, max_seqs=4, guaranteed=True)
    s.add(Request(0, 0.0, 16, 8), 0.0)            # needs 2 blocks for 24 tokens
    s.add(Request(1, 0.0, 16, 8), 0.0)
    batches, finished = run_to_end(s)
    assert [seq.request.id for seq in batches[0].sequences] == [0]      # 1 waits: only 1 block is left
    assert s.preemptions == 0 and [seq.request.id for seq in finished] == [0, 1]
    assert s.peak_blocks == 2 and s.used_blocks == 0


def test_the_peak_counts_the_blocks_held_just_before_a_preemption_frees_them():
    # 3 blocks: both 16-token prompts fill one each; at the first decode request 0 takes the last
    # free block (the cache is full), then request 1 finds none and is preempted, freeing its block.
    s = Scheduler(total_blocks=3, max_batch_tokens=64, max_seqs=4)
    s.add(Request(0, 0.0, 16, 8), 0.0)
    s.add(Request(1, 0.0, 16, 8), 0.0)
    s.complete(s.schedule(), 1.0)                 # both prefilled: 2 blocks used
    batch = s.schedule()
    assert [seq.request.id for seq in batch.sequences] == [0] and s.preemptions == 1
    assert s.used_blocks == 2 and s.peak_blocks == 3


def test_a_preemption_in_the_middle_keeps_the_batch_and_the_running_list_in_step():
    # Four prompts fill the four blocks; at the first decode the third (16 tokens) needs a second
    # block: the fourth, the newest, is preempted for it. The batch is the first three, in order.
    s = Scheduler(total_blocks=4, max_batch_tokens=64, max_seqs=8)
    for i in range(4):
        s.add(Request(i, 0.0, 16 if i == 2 else 8, 4), 0.0)
    s.complete(s.schedule(), 1.0)
    batch = s.schedule()
    assert s.preemptions == 1 and [seq.request.id for seq in s.waiting] == [3]
    assert [seq.request.id for seq in batch.sequences] == [seq.request.id for seq in s.running] == [0, 1, 2]
    assert batch.entries == ((1, 9, True), (1, 9, True), (1, 17, True))
    assert s.used_blocks == s.peak_blocks == 4
