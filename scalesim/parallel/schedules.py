"""Pipeline schedules: the order in which a stage runs forward and backward passes.

Each entry is (kind, micro_batch, chunk) with kind "F" or "B" and chunk the
stage's virtual chunk (0 without interleaving).

- GPipe (Huang et al. 2019): all forwards, then all backwards.
- 1F1B (PipeDream-Flush, Narayanan et al. 2019; Megatron-LM): stage s runs
  pp - s - 1 warm-up forwards, then alternates one forward and one backward,
  then drains the remaining backwards. Same bubble as GPipe, (p-1)/(m+p-1),
  with at most pp micro-batches in flight.
- Interleaved 1F1B (Narayanan et al. 2021, SC21): each stage holds v chunks;
  micro-batches go through the chunks in groups of pp, shrinking the bubble by
  about v. Needs the micro-batch count to be a multiple of pp.
"""

from __future__ import annotations

from scalesim.errors import InputError

Step = tuple[str, int, int]


def gpipe(stage: int, stages: int, micro_batches: int) -> list[Step]:
    return [("F", m, 0) for m in range(micro_batches)] + [("B", m, 0) for m in range(micro_batches)]


def one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[Step]:
    warmup = min(stages - stage - 1, micro_batches)
    order: list[Step] = [("F", m, 0) for m in range(warmup)]
    f, b = warmup, 0
    while f < micro_batches:
        order.append(("F", f, 0))
        f += 1
        order.append(("B", b, 0))
        b += 1
    order += [("B", m, 0) for m in range(b, micro_batches)]
    return order


def interleaved(stage: int, stages: int, micro_batches: int, chunks: int) -> list[Step]:
    """Megatron's interleaved 1F1B order for one stage (schedules.py, forward_backward_pipelining_with_interleaving)."""
    if micro_batches % stages:
        raise InputError(f"the interleaved schedule needs the micro-batches per step ({micro_batches}) to be a "
                         f"multiple of pp ({stages})", key="training.global_batch")
    total = micro_batches * chunks

    def step(kind: str, k: int) -> Step:
        """The k-th forward or backward unit: micro-batches in groups of `stages` per chunk."""
        group, within = divmod(k, stages * chunks)
        chunk = within // stages
        if kind == "B":
            chunk = chunks - 1 - chunk
        return kind, group * stages + within % stages, chunk

    warmup = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
    if micro_batches == stages:        # all forwards, then all backwards (Megatron: all_warmup_microbatches)
        warmup = total
    forwards = [step("F", k) for k in range(total)]
    backwards = [step("B", k) for k in range(total)]
    steady = [s for pair in zip(forwards[warmup:], backwards) for s in pair]
    return forwards[:warmup] + steady + backwards[total - warmup:]


def schedule(name: str, stage: int, stages: int, micro_batches: int, chunks: int = 1) -> list[Step]:
    if name == "gpipe":
        return gpipe(stage, stages, micro_batches)
    if name == "1f1b":
        return one_f_one_b(stage, stages, micro_batches)
    if name == "interleaved":
        return interleaved(stage, stages, micro_batches, chunks)
    raise InputError(f"unknown pipeline schedule '{name}'; allowed: gpipe, 1f1b, interleaved",
                     key="parallel.pp_schedule")


def in_flight(order: list[Step]) -> int:
    """Most micro-batch chunks whose forward ran and backward has not: what activations are held."""
    live = peak = 0
    for kind, _, _ in order:
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak
