"""Pipeline P2P as batched, synchronized exchanges (parallel.overlap_p2p_comm: false).

Megatron-LM without P2P overlap does not send and receive each tensor on its own: at fixed
points of its schedule it posts every send and receive due there as ONE
torch.distributed.batch_isend_irecv, waits on all of them, then calls torch.cuda.synchronize()
(megatron/p2p_communication.py _communicate, lines 104-130 @6985e58938, the release of the SC21
paper's runs; Megatron-Core's _batched_p2p_ops with batch_p2p_sync). So:

- an exchange starts only when the compute queued before it has finished: NCCL's stream waits on
  the current stream, and the exchange carries the output of the pass just run;
- it ends when every transfer of the batch has, sends included, so a stage waits for both
  neighbours to post their side; and the host issues nothing more until then, so the GPU idles
  while the exchange is in flight and until the next kernels are launched.

Where the exchanges fall and what each carries is the schedule's own
(megatron/schedules.py @6985e58938): `interleaved_events` transcribes
forward_backward_pipelining_with_interleaving (lines 141-366: one exchange after each warm-up
forward, after each steady-state forward + backward pair, after each cool-down backward; the
first stage receives the last stage's wrap-around outputs in the same exchange the last stage sends
them, ahead of their use), `one_f_one_b_events` forward_backward_pipelining_without_interleaving
(lines 369-469). A received tensor is the next of its chunk (each chunk runs its micro-batches in
order), which names the transfer the same way on both sides.

With the scatter-gather optimization (Megatron-LM of 2021's default,
--no-scatter-gather-tensors-in-pipeline turns it off; p2p_communication.py lines 61-66, 87-94,
133-141) each tensor-parallel rank sends 1/t of the (s, b, h) tensor and the receivers all-gather it
over the tensor-parallel group after the synchronize (mpu.gather_split_1d_tensor).
"""

from __future__ import annotations

from scalesim.program import ComputeTask

Exchange = tuple   # ("X", sends, receives): each a tuple of (direction, micro-batch, local chunk)
_STREAM_ORDERED = ("compute", "tp")    # what the current CUDA stream has queued (compute and its TP calls)


def applies(plan) -> bool:
    """Whether the plan's pipeline P2P runs as batched, synchronized exchanges (see the module)."""
    return plan.overlap_p2p_comm is False and plan.placement.pp > 1 and plan.schedule in ("1f1b", "interleaved")


def passes(rp):
    """RankProgram `rp`'s passes ("F" | "B", micro-batch, local chunk) in schedule order; when batched,
    each exchange's tasks are appended as the pass before it has been built."""
    if not rp.batched:
        yield from rp.b.stage_order(rp.stage)
        return
    plan = rp.plan
    for event in events(rp.stage, rp.pl.pp, plan.micro_batches, plan.chunks_per_stage):
        if event[0] == "X":
            exchange(rp, event)
        else:
            yield event


def events(stage: int, stages: int, micro_batches: int, chunks: int) -> list:
    """The stage's passes ("F" | "B", micro-batch, local chunk) and exchanges in issue order."""
    if chunks > 1:
        return interleaved_events(stage, stages, micro_batches, chunks)
    return one_f_one_b_events(stage, stages, micro_batches)


def interleaved_events(stage: int, stages: int, micro_batches: int, chunks: int) -> list:
    """forward_backward_pipelining_with_interleaving (schedules.py lines 141-366 @6985e58938), its
    sends and receives named by local chunk; a receive names the chunk that will use the tensor."""
    return _Interleaved(stage, stages, micro_batches, chunks).events()


class _Interleaved:
    """The interleaved schedule's loop, played once for one stage."""

    def __init__(self, stage: int, stages: int, micro_batches: int, chunks: int):
        self.s, self.p, self.v = stage, stages, chunks
        self.total = micro_batches * chunks
        self.all_warmup = micro_batches == stages
        self.warmup = self.total if self.all_warmup else min((stages - stage - 1) * 2 + (chunks - 1) * stages,
                                                             self.total)
        self.first, self.last = stage == 0, stage == stages - 1
        self.received = {"act": [0] * chunks, "grad": [0] * chunks}   # tensors received so far, per chunk
        self.out: list = []

    def chunk(self, k: int, forward: bool) -> int:            # get_model_chunk_id
        c = (k % (self.p * self.v)) // self.p
        return c if forward else self.v - 1 - c

    def micro_batch(self, k: int) -> int:
        group, within = divmod(k, self.p * self.v)
        return group * self.p + within % self.p

    def exchange(self, sends: list, recv_prev: int | None, recv_next: int | None) -> None:
        recvs = []
        for direction, c in (("act", recv_prev), ("grad", recv_next)):
            if c is not None:
                recvs.append((direction, self.received[direction][c], c))
                self.received[direction][c] += 1
        self.out.append(("X", tuple(sends), tuple(recvs)))

    def sent_act(self, k: int) -> list:     # the forward's output, unless the model's last chunk (loss)
        c = self.chunk(k, True)
        return [] if self.last and c == self.v - 1 else [("act", self.micro_batch(k), c)]

    def sent_grad(self, k: int) -> list:    # the backward's input gradient, unless the model's first chunk
        c = self.chunk(k, False)
        return [] if self.first and c == 0 else [("grad", self.micro_batch(k), c)]

    def events(self) -> list:
        if not self.first:                  # recv_forward before the warm-up (no _communicate on stage 0)
            self.exchange([], 0, None)
        for k in range(self.warmup):
            self.out.append(("F", self.micro_batch(k), self.chunk(k, True)))
            following = self.chunk(k + 1, True)
            recv_prev = None if (self.first and following == 0) or k == self.total - 1 else following
            ends = k == self.warmup - 1 and not self.all_warmup and not self.last
            self.exchange(self.sent_act(k), recv_prev, self.v - 1 if ends else None)
        self.steady()
        if self.all_warmup and not self.last:   # recv_backward
            self.exchange([], None, self.v - 1)
        for k in range(self.total - self.warmup, self.total):
            self.out.append(("B", self.micro_batch(k), self.chunk(k, False)))
            following = self.chunk(k + 1, False)
            last_stage_own = self.last and following == self.v - 1
            self.exchange(self.sent_grad(k), None, None if last_stage_own or k == self.total - 1 else following)
        return self.out

    def steady(self) -> None:
        p, v, remaining = self.p, self.v, self.total - self.warmup
        for k in range(remaining):
            forward_k = k + self.warmup
            self.out.append(("F", self.micro_batch(forward_k), self.chunk(forward_k, True)))
            self.out.append(("B", self.micro_batch(k), self.chunk(k, False)))
            if self.first:                  # the first stage runs p - 1 ahead of the last
                nxt = self.chunk(forward_k - (p - 1), True)
                recv_prev = None if nxt == v - 1 else nxt + 1
            else:
                recv_prev = self.chunk(forward_k + 1, True)
            if self.last:
                nxt = self.chunk(k - (p - 1), False)
                recv_next = None if nxt == 0 else nxt - 1
            else:
                recv_next = self.chunk(k + 1, False)
            self.exchange(self.sent_act(forward_k) + self.sent_grad(k),
                          None if k == remaining - 1 else recv_prev, recv_next)


def one_f_one_b_events(stage: int, stages: int, micro_batches: int) -> list:
    """forward_backward_pipelining_without_interleaving (schedules.py lines 369-469 @6985e58938): the
    first stage neither receives activations nor sends gradients, the last the reverse."""
    first, last = stage == 0, stage == stages - 1
    warmup = min(stages - stage - 1, micro_batches)
    remaining = micro_batches - warmup
    out: list = []
    act = [0]
    grad = [0]

    def exchange(sends: list, recv_act: bool, recv_grad: bool) -> None:
        recvs = []
        if recv_act and not first:
            recvs.append(("act", act[0], 0))
            act[0] += 1
        if recv_grad and not last:
            recvs.append(("grad", grad[0], 0))
            grad[0] += 1
        sends = [x for x in sends if not (x[0] == "act" and last or x[0] == "grad" and first)]
        if sends or recvs:              # recv_forward / send_forward ... skip _communicate at the ends
            out.append(("X", tuple(sends), tuple(recvs)))

    for i in range(warmup):
        exchange([], True, False)
        out.append(("F", i, 0))
        exchange([("act", i, 0)], False, False)
    if remaining > 0:
        exchange([], True, False)
    for i in range(remaining):
        out.append(("F", warmup + i, 0))
        exchange([("act", warmup + i, 0)], False, True)
        out.append(("B", i, 0))
        exchange([("grad", i, 0)], i < remaining - 1, False)
    for i in range(warmup):
        exchange([], False, True)
        out.append(("B", remaining + i, 0))
        exchange([("grad", remaining + i, 0)], False, False)
    return out


def exchange(rp, event: Exchange) -> None:
    """Append one exchange to RankProgram `rp`'s tasks: its transfers, after the compute queued
    before them; the synchronize the host waits on; with scatter-gather, the receivers' all-gathers."""
    _, sends, recvs = event
    b, pl, stage = rp.b, rp.pl, rp.stage
    queued = next((i for i in range(len(rp.list) - 1, -1, -1) if rp.list[i].stream in _STREAM_ORDERED), None)
    deps = () if queued is None else (queued,)
    transfers = []
    for direction, mb, c in sends:
        g = c * pl.pp + stage
        target = g + 1 if direction == "act" else g - 1
        stream = "pp_send_next" if direction == "act" else "pp_send_prev"
        transfers.append(b._p2p(rp.list, rp.rank, rp.neighbour(target), direction, mb, target, stream, deps))
    for direction, mb, c in recvs:
        g = c * pl.pp + stage
        source = g - 1 if direction == "act" else g + 1
        stream = "pp_recv_prev" if direction == "act" else "pp_recv_next"
        transfers.append(b._p2p(rp.list, rp.neighbour(source), rp.rank, direction, mb, g, stream, deps))
    for t in transfers:                 # the batch is synchronized as a whole, below
        rp.list[t].host_sync = False
    rp.list.append(ComputeTask("pp synchronize", "other", 0.0, deps=tuple(transfers) + deps,
                               host_sync=True))
    wait = len(rp.list) - 1
    if not (b.plan.pp_scatter_gather and pl.tp > 1 and not rp.sp) or not recvs:
        return
    gathers = [rp.call("pp_gather", "all_gather", rp.tp_group, b.activation_bytes, "tp", (wait,), ("tp",))
               for _ in recvs]
    rp.list.append(ComputeTask("pp gathered", "other", 0.0, deps=tuple(g for g in gathers if g is not None)))
