"""Replay whole training steps of nanotron's first pipeline stage (TP 1, 1F1B on 2 stages) through PyTorch's caching
allocator, and compare the reserve it leaves with each run's logged `Mem Res` (both less scalesim's counted state).

A check of the allocator's part in the sweep's 2-stage memory figures (validation/memory-notes.md, nmem11), not a
model. ZeRO-1 is the one code path with large transient requests: src/nanotron/distributed.py @67c5ebb6
reduce_scatter_coalesced (l. 115-121, `_flatten_dense_tensors` copies of each rank's share of a DDP bucket's fp32
gradients; called by the DDP hook, optim/gradient_accumulator.py l. 371) and all_gather_coalesced (l. 201-204, the
rank's slices and every rank's, 2 bytes a parameter; called after the optimizer step, optim/zero.py l. 234).

The sequence, stage 0 of 2 (parallel/pipeline_parallel/engine.py @67c5ebb6 l. 254-330: one warm-up forward, then a
forward before each backward, the last backward DDP's sync one, l. 111-115):
- forward: the embedding's (S, h) output, then each decoder layer as validation/nanotron_allocator_replay.py plays
  it with TP 1 (a row linear's output is the tensor itself, no reduce-scatter, no MemoryBuffer);
- backward: the received (S, h) gradient, the layers in reverse with each weight's 16-bit gradient allocated where
  its GEMM runs and kept until the whole backward is done (FP32GradientAccumulator.backward, l. 204-228: the adds
  into the fp32 buffer and `half_param.grad = None` run after `loss.backward()`), the embedding's dense (V, h)
  gradient last; on the sync backward each 25 MB DDP bucket (ddp_bucket_cap_mb 25), once its gradients exist,
  makes dp flat fp32 copies of its gradients (bucket/dp each) and one output flat, freed when the hook returns
  (`--pending N`: freed only once N later ones exist, NCCL's recordStream; `--torch-flatten`: also the flat input
  ProcessGroupNCCL::reduce_scatter makes of a list, flatten_for_scatter_gather);
- optimizer step: Adam's exp_avg and exp_avg_sq of the rank's slice of every parameter (allocated at the first
  step, torch.optim lazily), then for ZeRO-1 the all-gather's flat input and dp flat outputs (2 bytes x P/dp each;
  the runs' optimizer-step `Mem Alloc` - state is 2P + 2P/dp bytes at every dp, so no further copy is made).
Requests of 1 MiB or less (the small pool) are left out. Persistent state (weights, fp32 gradient buffer, fp32
master, DDP buckets) is too: exact-size segments never freed. Three iterations, as the benchmark logs at iteration
3; `logged` is max_memory_reserved from the reset after the third pipeline (trainer.py l. 512-513, logging.py
l. 250-259) through the optimizer step. `--device-gib` caps the allocator at the GPU less `--outside-gib` and the
counted state: a request past it releases every free whole segment and retries (CUDACachingAllocator malloc:
release_cached_blocks, 'Free all non-split cached blocks and retry alloc'). GiB, Adam's state subtracted.

    python validation/nanotron_step_replay.py CSV [--where "model == '8.86G'"] [--device-gib 79.6 --outside-gib 2]

CSV: the sweep's rows, as for nanotron_sweep_replay.py (eyao600/Rapid-LLM
validation_scripts/huggingface_data/bench_final2_mod_add.csv @24ef24c6).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from allocator_rounding import SMALL_SIZE
from nanotron_allocator_replay import Layers
from nanotron_sweep_replay import first_stage_memory, row_fields, scenario_of

from scalesim.parallel.cost_balance import nanotron_blocks_per_stage

GIB = 2**30
BUCKET_BYTES = 25 * 10**6       # ddp_bucket_cap_mb 25 (the sweep's CSV column), 16-bit gradients


class Stage(Layers):
    """Stage 0 at TP 1: decoder layers with their weight gradients, the embedding, and the step around them."""

    def __init__(self, hidden: int, ffn: int, seq: int, vocab: int, layers: int, dp: int, zero: int,
                 pending: int = 0, torch_flatten: bool = False) -> None:
        super().__init__(hidden, ffn, 1, seq, pending)
        self.a = type(self.a)()              # no MemoryBuffer at TP 1
        self.a.before_release = self.flush
        self.torch_flatten = torch_flatten
        self.h, self.ffn, self.vocab, self.layers, self.dp, self.zero = hidden, ffn, vocab, layers, dp, zero
        self.grads: list[int] = []
        self.adam: list[int] = []
        self.sync = False
        self.bucket = 0

    def malloc(self, size: int):
        """Requests of 1 MiB or less come from the small pool (2 MiB segments): left out, None."""
        return self.a.malloc(size) if size > SMALL_SIZE else None

    def free(self, *handles) -> None:
        for h in handles:
            if h is not None:
                self.a.free(h)

    def reduce_scattered(self) -> int:
        return self.a.malloc(self.full)     # TP 1: the row linear's output itself

    def weight_grad(self, numel: int) -> None:
        self.grads.append(self.malloc(2 * numel))
        if self.sync:
            self.bucket += 2 * numel
            if self.bucket >= BUCKET_BYTES:
                self.ddp_hook(self.bucket)
                self.bucket = 0

    def ddp_hook(self, half_bytes: int) -> None:
        """The fp32 hook of one bucket: ZeRO-1 reduce-scatters flat copies; ZeRO-0 all-reduces in place."""
        if self.zero != 1:
            return
        fp32 = 2 * half_bytes
        flats = [self.malloc(fp32 // self.dp) for _ in range(self.dp + 1)]
        if self.torch_flatten:
            flats.append(self.malloc(fp32))
        for f in flats:
            if f is not None:
                self.nccl_free(f)

    def flush(self) -> None:
        """The allocator synchronises on the pending events: every waiting NCCL input goes back to the pool."""
        while self.waiting:
            self.a.free(self.waiting.pop(0))

    def params(self) -> list[int]:
        h, f = self.h, self.ffn
        return [self.vocab * h] + [3 * h * h, h * h, 2 * f * h, f * h] * self.layers

    def backward(self, grad: int, kept: tuple) -> int:
        h, f = self.h, self.ffn
        self.weight_grad(f * h)            # down_proj
        self.weight_grad(2 * f * h)        # gate_up_proj
        self.weight_grad(h * h)            # o_proj
        self.weight_grad(3 * h * h)        # qkv_proj
        return super().backward(grad, kept)

    def micro_forward(self) -> list:
        x = self.new(1)                     # embedding output
        kept = []
        for _ in range(self.layers):
            x, k = self.forward(x)
            kept.append(k)
        self.free(x)                        # sent to stage 1
        return kept

    def micro_backward(self, kept: list, sync: bool) -> None:
        self.sync, self.bucket = sync, 0
        grad = self.new(1)                  # received from stage 1
        for k in reversed(kept):
            grad = self.backward(grad, k)
        self.free(grad)
        self.weight_grad(self.vocab * self.h)  # embedding's dense gradient
        if sync and self.bucket:
            self.ddp_hook(self.bucket)
        for g in self.grads:
            self.free(g)
        self.grads = []

    def optimizer_step(self) -> None:
        if not self.adam:
            shards = self.dp if self.zero == 1 else 1
            self.adam = [self.malloc(4 * n // shards) for n in self.params() for _ in range(2)]
        if self.zero == 1:
            shard = 2 * sum(self.params()) // self.dp
            flats = [self.malloc(shard) for _ in range(self.dp + 1)]
            for f in flats:
                self.free(f)

    def adam_bytes(self) -> int:
        return sum(self.a.blocks[h][1][1] for h in self.adam if h is not None)


def iteration(stage: Stage, gas: int) -> None:
    """One step's pipeline (stage 0 of 2, 1F1B), up to the optimizer step."""
    pending = [stage.micro_forward()]
    for _ in range(1, gas):
        pending.append(stage.micro_forward())
        stage.micro_backward(pending.pop(0), sync=False)
    stage.micro_backward(pending.pop(0), sync=True)


def replay(layers: int, hidden: int, ffn: int, tokens: int, vocab: int, dp: int, zero: int, gas: int,
           limit: float | None, pending: int = 0, torch_flatten: bool = False) -> tuple:
    """(max allocated, max reserved, logged, releases) of the third step, GiB without Adam's state: logged is
    max_memory_reserved after the reset that follows the pipeline (trainer.py l. 512-513), the optimizer step
    included. `limit`: bytes the allocator may reserve beside the persistent state (None: unlimited)."""
    stage = Stage(hidden, ffn, tokens, vocab, layers, dp, zero, pending, torch_flatten)
    stage.a.limit = limit
    for _ in range(2):
        iteration(stage, gas)
        stage.optimizer_step()
    stage.a.peak_allocated, stage.a.peak_reserved = 0, stage.a.reserved
    iteration(stage, gas)
    peak = stage.a.peak_reserved
    stage.a.peak_reserved = stage.a.reserved
    stage.optimizer_step()
    adam = stage.adam_bytes()
    return ((stage.a.peak_allocated - adam) / GIB, (max(peak, stage.a.peak_reserved) - adam) / GIB,
            (stage.a.peak_reserved - adam) / GIB, stage.a.releases)


def stage0_layers(layers: int, hidden: int, ffn: int, vocab: int) -> int:
    """Decoder layers nanotron places on the first of 2 stages (models/base.py build_model @67c5ebb6)."""
    return nanotron_blocks_per_stage([4.0 * hidden * hidden + 3.0 * hidden * ffn] * layers,
                                     float(vocab * hidden), 2)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--where", default="True", help="as nanotron_sweep_replay.py's; TP 1, PP 2 runs only")
    parser.add_argument("--device-gib", type=float, default=None,
                        help="GPU memory; with it the allocator releases its free segments when a request would pass "
                             "device - outside - counted state (default: no limit)")
    parser.add_argument("--outside-gib", type=float, default=0.0, help="memory outside the allocator (context, NCCL)")
    parser.add_argument("--pending", type=int, default=0, help="DDP-hook flats waiting for their reduce-scatter")
    parser.add_argument("--torch-flatten", action="store_true", help="add ProcessGroupNCCL's flat input copy")
    args = parser.parse_args(argv)
    print("| job | run | Mem Res - counted state | replay: max allocated | max reserved | logged | releases | "
          "scalesim's reserved - state |")
    print("|---|---|---|---|---|---|---|---|")
    with args.csv.open() as fh:
        for row in csv.DictReader(fh):
            f = row_fields(row)
            if row["status"] != "Success" or f["tp"] != 1 or f["pp"] != 2 or not eval(args.where, {}, f):  # noqa: S307
                continue
            memory = first_stage_memory(scenario_of(row, {}))
            state = (memory.weights + memory.gradients + memory.optimizer + memory.grad_buckets) / GIB
            hidden, ffn, vocab = int(row["hidden_size"]), int(row["interm_dim"]), int(row["vocab_size"])
            layers = stage0_layers(int(row["num_layers"]), hidden, ffn, vocab)
            adam = 8 * sum(Stage(hidden, ffn, 1, vocab, layers, f["dp"], f["zero"]).params()) / (
                f["dp"] if f["zero"] == 1 else 1)
            limit = None if args.device_gib is None else (args.device_gib - args.outside_gib - state) * GIB + adam
            try:
                live, reserved, logged, releases = replay(layers, hidden, ffn, 4096 * f["mbs"], vocab, f["dp"],
                                                          f["zero"], f["gas"], limit,
                                                          args.pending, args.torch_flatten)
                cells = f"{live:.2f} | {reserved:.2f} | {logged:.2f} | {releases}"
            except MemoryError:
                cells = "out of memory | | |"
            print(f"| {f['job']} | {f['model']} dp{f['dp']} mbs{f['mbs']} gas{f['gas']} z{f['zero']} | "
                  f"{float(row['Mem Res (GB)']) - state:.2f} | {cells} | {memory.reserved / GIB - state:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
