"""A training step under any mix of data, tensor, pipeline and context parallelism and ZeRO.

Every rank gets its own task list (see `scalesim.program`): compute on the
"compute" stream; tensor-parallel collectives on "tp" (blocking, as in
Megatron-LM without communication overlap); context-parallel key/value
exchange on "cp" (beside the attention half, or before it: parallel/cp_exchange.py);
gradient reduction and ZeRO gathers on "comm"; pipeline sends and receives on
one stream per neighbour and direction. A collective's key is shared by the
ranks of its group, which all generate the same sequence of calls.

What runs, per rank, for each (forward | backward, micro-batch, chunk) of its
pipeline schedule:

- forward: receive the activation from the previous stage; per layer
  (ZeRO-3: all-gather its parameters first, at most two layers ahead, as FSDP
  limits in-flight gathers), per block half (attention, MLP) the compute then
  the TP all-reduce (with sequence parallelism: all-gather before and
  reduce-scatter after); send the activation to the next stage.
- backward: receive the gradient from the next stage; per layer in reverse,
  recompute (full or selective checkpointing), then backward with its TP
  collectives; ZeRO-3 reduce-scatters each layer's gradients; otherwise the
  last micro-batch's backward launches DDP-style bucketed reductions
  (all-reduce; ZeRO-1/2: reduce-scatter) over the ranks holding the same
  parameters (data x context parallel), overlapping what backward remains
  (interleaved: `stage` passes later, aligned_grad_sync.py); send back.
- then the optimizer step over the rank's shard; ZeRO-1/2 all-gather the
  updated parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesim.collectives import LATENCY_BOUND_BYTES, CollectivePlan, Phase, links_crossed, plan_collective
from scalesim.collectives.kernels import cta_limited, sm_share
from scalesim.costs.compute import ELEMENT_BYTES, LayerTime, layer_time
from scalesim.costs.finetune import (adapter_ops, adapter_shapes, finetune_layer_time,
                                     stored_weight_bytes, trainable_params)
from scalesim.costs.host import (expert_host_s, launch_host_s, layer_kernels, module_kernels, outside_cuda_graphs,
                                 with_layer_host_s)
from scalesim.costs.memory import state_bytes_per_param
from scalesim.costs.recompute import recomputed_blocks, recomputed_kernels
from scalesim.hardware import GpuSpec
from scalesim.models.spec import LayerSpec, ModelSpec
from scalesim.parallel.cp_exchange import kv_bytes
from scalesim.parallel.experts import dispatch_copies, experts_whole, rank_load_factor, shard_experts
from scalesim.parallel.hbm_contention import contended, held_shares, share_traffic
from scalesim.parallel.offload import host_copy_plan, movers
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.rank_program import RankProgram
from scalesim.parallel.schedules import schedule
from scalesim.parallel.sharding import shard_layer, split_attention_mlp, split_moe
from scalesim.parallel.stages import model_chunks
from scalesim.program import CollectiveTask, Program
from scalesim.topology import Topology


@dataclass(frozen=True, slots=True)
class _LayerWork:
    """One layer as one GPU runs it: its halves' times (blocks under TP) or its whole time."""

    layer: LayerSpec
    parts: tuple[LayerTime, ...]          # (attention, MLP) for split blocks, else (whole,)
    is_block: bool
    halves: tuple[LayerSpec, ...] = ()    # the layer specs behind `parts`
    host_s: tuple[dict[str, float], ...] = ()   # per part: host time to issue each pass's kernels
    moe: bool = False                     # an MoE block: parts are attention, route, experts, combine
    recomputed: bool = True               # checkpointed as the plan says (False: partial recompute spares it)


class StepBuilder:
    """Builds the ranks' tasks for one optimizer step. Pure: no simulation here.

    Symmetry (`symmetric=True`): ranks that differ only in their tensor-,
    context- or data-parallel index run identical work on identically wired
    GPUs, so only one rank per pipeline stage (tp = cp = dp = 0) is simulated.
    Its collectives still carry the flows of every rank of the group, plus
    those of the symmetric copies of the group that cross the same links
    (e.g. the data-parallel rings of the other tensor-parallel ranks sharing
    a NIC), so contention is simulated, not assumed away; only the copies'
    own compute and waiting are taken as identical. Tests check it against
    the full simulation.
    """

    def __init__(self, model: ModelSpec, gpu: GpuSpec, topology: Topology, plan: ParallelPlan,
                 symmetric: bool = True, chunks: tuple[tuple[LayerSpec, ...], ...] | None = None,
                 memo: dict | None = None, orders: tuple | None = None):
        self.model, self.gpu, self.topology, self.plan = model, gpu, topology, plan
        # The caller's cache of plans and timings on this topology (scalesim/app/caches.py), or this build's.
        self.memo = {} if memo is None else memo
        self.orders = orders                           # per stage: its passes in schedule order
        pl = plan.placement
        self.simulated = (tuple(pl.rank(tp=0, cp=0, dp=0, pp=p) for p in range(pl.pp)) if symmetric
                          else tuple(range(pl.size)))
        self._simulated_set = set(self.simulated)
        self._calls: dict[tuple, tuple] = {}          # a call's plan, participants, ...: see _collective (and _fetch)
        self.symmetric = symmetric
        if chunks is None:
            chunks = model_chunks(model, plan.chunks, plan.pipeline_blocks)
        sp, split = plan.sequence_parallel and pl.tp > 1, pl.tp > 1 or pl.cp > 1 or plan.layer_synced
        moe = model.moe
        load = rank_load_factor(moe, pl.ep, plan.moe_imbalance) if moe is not None else 1.0
        self.chunk_work: list[list[_LayerWork]] = []
        interned, timed = {}, {}        # (kind, ops) -> the one half; id(that half) -> (LayerTime, host times)
        self._held_rows: dict[tuple, int] = {}         # row key -> Program.held_factors row
        self._held_timings: list[tuple] = []           # per row: (content key, its seconds on a given GPU)
        self._layer_rows: dict[tuple, int] = {}        # (layer ids, pass) -> row, for RankProgram.layer_row
        self._peer_tasks: dict[tuple, tuple] = {}      # RankProgram.peers_key -> the tasks of those ranks
        for chunk in chunks:
            work = []
            for layer, recomputed in zip(chunk, recomputed_blocks(chunk, plan.recompute_layers)):
                local = shard_layer(layer, pl.tp, pl.cp, sp, self.memo)
                block = local.kind == "transformer_block"
                is_moe = local.expert_params > 0
                if is_moe:
                    local = shard_experts(local, pl.ep, load, pl.tp if experts_whole(pl) else 1, plan.moe_dispatcher)
                    halves = split_moe(local)
                else:
                    halves = split_attention_mlp(local, self.memo) if block and split else (local,)
                # One object per distinct layer (names aside), timed once; caches keyed by identity serve every copy.
                halves = tuple(interned.setdefault((h.kind, h.ops), h) for h in halves)
                known = [timed.get(id(h)) or timed.setdefault(id(h), (self._layer_time(h), self._host_times(h)))
                         for h in halves]
                work.append(_LayerWork(local, tuple(k[0] for k in known), block and len(halves) >= 2, tuple(halves),
                                       with_layer_host_s(tuple(k[1] for k in known),
                                                         plan.pipeline_layer_host_s * block), is_moe, recomputed))
            self.chunk_work.append(work)
        ebytes = ELEMENT_BYTES[plan.precision]
        tokens = (model.tokens_per_sample or 1) // pl.cp
        hidden = model.hidden or 0
        # Megatron's TP collectives and PP transfers carry b x s x h activations.
        self.activation_bytes = plan.micro_batch * tokens * hidden * ebytes
        self.pp_bytes = self.activation_bytes / (pl.tp if sp or plan.pp_scatter_gather else 1)
        self.cp_bytes = kv_bytes(model, plan)           # the group's K and V, this TP rank's heads (parallel/cp_exchange.py)
        # Each rank dispatches dispatch_copies of its tokens (1/tp of them per TP rank, as Megatron-Core
        # does with sequence parallelism); the busiest rank receives `load` times the mean and all wait
        # for it, so every rank's all-to-all is timed at that size.
        self.a2a_bytes = (plan.micro_batch * tokens * dispatch_copies(moe, pl.ep, plan.moe_dispatcher) * hidden
                          * ebytes / pl.tp * load if moe is not None else 0.0)
        _, self.grad_bytes_per_param, _ = state_bytes_per_param(plan.precision, plan.optimizer)
        if plan.grad_reduce_dtype is not None:
            self.grad_bytes_per_param = ELEMENT_BYTES[plan.grad_reduce_dtype]
        self.weight_bytes_per_param = ebytes

    # ------------------------------------------------------------------ helpers

    def _layer_time(self, layer: LayerSpec, held_sms: int = 0, gpu: GpuSpec | None = None) -> LayerTime:
        """The layer's times on this GPU (`gpu`: as overlapped calls leave it, parallel/hbm_contention.py) with
        `held_sms` of its SMs held by NCCL kernels (kept in the memo by content: the same block recurs in
        every layer and, in a sweep, every plan)."""
        plan, gpu = self.plan, gpu or self.gpu
        key = ("layer-time", gpu, plan.precision, plan.micro_batch, plan.checkpointing, plan.recompute_modules,
               plan.attention, plan.memory_format, plan.finetune, layer.kind, layer.ops, held_sms)
        known = self.memo.get(key)
        if known is not None:
            return known
        if plan.finetune is not None:
            known = finetune_layer_time(layer, gpu, plan.precision, plan.micro_batch, plan.finetune,
                                        plan.checkpointing, plan.attention, plan.memory_format, held_sms)
        else:
            known = layer_time(layer, gpu, plan.precision, plan.micro_batch, plan.checkpointing,
                               plan.attention, plan.memory_format, held_sms, plan.recompute_modules)
        self.memo[key] = known
        return known

    def _host_times(self, layer: LayerSpec) -> dict[str, float]:
        """Host time to issue one micro-batch's kernels of the layer, per pass."""
        plan = self.plan
        if plan.host_dispatch_s <= 0:
            return {"forward": 0.0, "backward": 0.0, "recompute": 0.0}
        forward, backward, attention = layer_kernels(layer, plan.attention)
        if plan.finetune is not None:
            # Each adapter launches its own kernels, in both passes (costs/adapters.py adapter_ops);
            # frozen layers skip their weight-gradient GEMMs.
            for shape in adapter_shapes(layer, plan.finetune):
                extra_forward, extra_backward = adapter_ops(shape, plan.finetune, 1)
                forward += len(extra_forward)
                backward += len(extra_backward)
            gemms = sum(1 for op in layer.ops if op.kind == "gemm")
            backward -= gemms
            if plan.finetune.quantized:          # one NF4 dequantisation kernel per GEMM and pass
                forward += gemms
                backward += gemms
        recompute = {"full": forward, "selective": module_kernels(layer, plan.recompute_modules, attention),
                     "selective-op": recomputed_kernels(layer)}.get(plan.checkpointing, 0)
        moe = self.model.moe
        graphs = plan.cuda_graphs and not (moe is not None and outside_cuda_graphs(layer, moe.capacity_factor))
        times = {"forward": launch_host_s(forward, plan.host_dispatch_s, graphs),
                 "backward": launch_host_s(backward, plan.host_dispatch_s, graphs, backward=True),
                 # recomputation re-runs the Python forward of the checkpointed part
                 "recompute": launch_host_s(recompute, plan.host_dispatch_s, graphs)}
        experts_forward, experts_backward = expert_host_s(layer, plan.host_dispatch_s, graphs, plan.moe_dispatcher)
        if experts_forward:                  # grouped expert MLP: host work per local expert
            times["forward"] += experts_forward
            times["backward"] += experts_backward
            if plan.checkpointing == "full" or "moe" in plan.recompute_modules:
                times["recompute"] += experts_forward
        return times

    def _held_factor(self, memo: dict, content: tuple, seconds_on, share: float, traffic: float) -> float:
        """How much longer a compute task takes while NCCL's blocks hold `share` of the SMs and move
        `traffic` bytes/s through its memory: its time on the SMs and bandwidth left (the GEMMs' tiles in
        waves over fewer SMs) over its time alone. `memo`: the factors kept for this GPU and plan's
        compute settings (`_held_factors`)."""
        blocks = round(share * self.gpu.sms)
        if (content, blocks, traffic) not in memo:
            alone = seconds_on(0, self.gpu)
            held = seconds_on(blocks, contended(self.gpu, traffic))
            memo[(content, blocks, traffic)] = held / alone if alone > 0 else 1.0
        return memo[(content, blocks, traffic)]

    def _held_row(self, timing: tuple) -> int:
        """The Program.held_factors row of a kind of compute task; identical layers share one.

        `timing` is (row key, content key, seconds on a given GPU): the row key is cheap to
        hash (identities of interned layers), the content key lets other builds reuse factors."""
        row_key = timing[0]
        row = self._held_rows.get(row_key)
        if row is None:
            row = self._held_rows[row_key] = len(self._held_timings)
            self._held_timings.append(timing[1:])
        return row

    def _held_factors(self, tasks: dict[int, tuple]) -> tuple:
        """Each row's slow-down under every SM share the program's calls hold, one call at a
        time or two at once (ZeRO-3's gathers and reductions run on separate streams)."""
        shares = held_shares(share_traffic(tasks, self.topology.capacity_bytes_per_s, self.memo)
                             if self.gpu.sms > 0 else {})
        plan = self.plan        # the factors of a GPU and compute settings, kept for the command (by content)
        memo = self.memo.setdefault(("held-factor", self.gpu, plan.precision, plan.micro_batch, plan.checkpointing,
                                     plan.recompute_modules, plan.attention, plan.memory_format, plan.optimizer,
                                     plan.finetune), {})
        return tuple(tuple((share, self._held_factor(memo, content, seconds_on, share, traffic))
                           for share, traffic in shares)
                     for content, seconds_on in self._held_timings)

    def _with_copies(self, op: str, group: tuple[int, ...], size: float, span: tuple[str, ...]) -> CollectivePlan:
        """The group's plan, merged with the symmetric copies of the group that share its links.

        `span` are the placement dimensions the group spans; copies differ in
        the other dimensions except pp.
        """
        if not self.symmetric or size <= LATENCY_BOUND_BYTES:       # copies: only where bytes matter
            return plan_collective(op, self.topology, group, size, memo=self.memo)
        key = ("with-copies", op, group, size, span)
        memo = self.memo
        if key in memo:
            return memo[key]
        plan = plan_collective(op, self.topology, group, size, memo=memo)
        # A copy of a symmetric group runs the same algorithm as the group itself.
        extra = [plan_collective(op, self.topology, copy, size, plan.algo, plan.protocol, memo)
                 for copy in self._sharing_copies(plan, group, span)]
        if extra:
            phases = []
            for i, phase in enumerate(plan.phases):
                flows = phase.flows + tuple(f for o in extra if i < len(o.phases) for f in o.phases[i].flows)
                latency = max([phase.latency_s] + [o.phases[i].latency_s for o in extra if i < len(o.phases)])
                phases.append(Phase(latency, flows))
            plan = CollectivePlan(plan.op, plan.algo, plan.ranks, plan.size_bytes, tuple(phases), plan.protocol)
        memo[key] = plan
        return plan

    def _sharing_copies(self, plan: CollectivePlan, group: tuple[int, ...], span: tuple[str, ...]) -> list:
        """The copies of `group` whose plan (the same algorithm and protocol as `plan`) shares a link
        with it. Which links a plan crosses does not depend on its size, so this is found once for
        every size of call."""
        key = ("sharing-copies", plan.op, group, span, plan.algo, plan.protocol, plan.size_bytes > 0)
        memo = self.memo
        if key in memo:
            return memo[key]
        used = {link for phase in plan.phases for f in phase.flows for link in f.links}
        topo = self.topology
        # A copy can only share a link with the plan inside the plan's servers, or on
        # the fabric next to a switch the plan crosses (routes run NIC, leaf, [spine,
        # leaf], NIC): copies that touch none of those servers are not planned at all.
        near = {topo.server_of(r) for r in group} | topo.servers_reaching(used)
        sharing = []
        for copy, servers in self._copies(group, span):
            if near.isdisjoint(servers):
                continue
            if not used.isdisjoint(links_crossed(plan.op, topo, copy, plan.size_bytes, plan.algo, plan.protocol, memo)):
                sharing.append(copy)
        memo[key] = sharing
        return sharing

    def _copies(self, group: tuple[int, ...], span: tuple[str, ...]) -> list[tuple[tuple[int, ...], frozenset]]:
        """The symmetric copies of `group` (differing from it in the dimensions outside `span`, except
        pp) and the servers each touches; the same for every size of call, so found once."""
        pl = self.plan.placement
        key = ("copies", pl, group, span)
        if key not in self.memo:
            self.memo[key] = [(copy, frozenset(map(self.topology.server_of, copy)))
                              for copy in pl.symmetric_copies(group, span)]
        return self.memo[key]

    def _sm_share(self, plan: CollectivePlan, ctas: int | None = None) -> float:
        key = ("sm-share", plan.op, plan.algo, plan.ranks, ctas)
        memo = self.memo
        if key not in memo:
            memo[key] = sm_share(plan, self.topology, self.gpu.sms, ctas)
        return memo[key]

    def _trained(self, layer: LayerSpec) -> int:
        """Parameters with gradients and optimizer state: all, or the adapters under LoRA."""
        return layer.params if self.plan.finetune is None else trainable_params(layer, self.plan.finetune)

    def _expert_trained(self, layer: LayerSpec) -> int:
        """Of the layer's trained parameters, the routed experts' (reduced over expert-data-parallel ranks)."""
        return layer.expert_params if self.plan.finetune is None else 0

    def _stored(self, layer: LayerSpec) -> float:
        """Bytes of the layer's weights as gathered or fetched (NF4 base under QLoRA, plus adapters)."""
        if self.plan.finetune is None:
            return layer.params * self.plan.gathered_bytes_per_param(layer, self.weight_bytes_per_param)
        return (stored_weight_bytes(layer, self.plan.precision, self.plan.finetune)
                + self._trained(layer) * self.weight_bytes_per_param)

    def _fetch(self, tasks: list, counters: dict, rank: int, layer: LayerSpec, shards: int, dep) -> int:
        """Offloaded weights: copy the layer (its 1/shards under ZeRO-3) from host memory to the GPU."""
        seq = counters.get(("fetch", rank), 0)
        counters[("fetch", rank)] = seq + 1
        size = self._stored(layer) / shards
        if (plan := self._calls.get(("fetch", rank, size))) is None:       # every layer's, every pass
            plan = self._calls[("fetch", rank, size)] = host_copy_plan(self.topology, rank, movers(
                self.topology, rank, self.plan.placement.size, self.symmetric), size, False, self.memo)
        tasks.append(CollectiveTask(f"fetch {layer.name}", f"offload/fetch/{rank}/{seq}", plan,
                                    deps=() if dep is None else (dep,), stream="offload"))
        return len(tasks) - 1

    def _participants(self, group: tuple[int, ...]) -> int:
        return sum(1 for r in group if r in self._simulated_set)

    def _collective(self, tasks: list, counters: dict, kind: str, op: str, group: tuple[int, ...], size: float,
                    stream: str, deps: tuple[int, ...], span: tuple[str, ...] = (), comm: str | None = None) -> int | None:
        if len(group) <= 1 or size <= 0:
            return None
        counter = (kind, group[0])
        seq = counters.get(counter, 0)
        counters[counter] = seq + 1
        # (kind, op, group, bytes, span, comm) -> (plan, participants, share, task name, key prefix)
        known = self._calls.get(call := (kind, op, group, size, span, comm))    # recurs every micro-batch and layer
        if known is None:
            plan = cta_limited(self._with_copies(op, group, size, span), self.topology, ctas := self.plan.max_ctas(span, comm))
            known = self._calls[call] = (plan, self._participants(group), self._sm_share(plan, ctas),
                                         f"{kind} {op}", f"{kind}/{group[0]}/")
        plan, participants, share, name, prefix = known
        tasks.append(CollectiveTask(name, prefix + str(seq), plan, deps if None not in deps else
                                    tuple(d for d in deps if d is not None), stream, "comm", participants, share,
                                    self.plan.host_dispatch_s))
        return len(tasks) - 1

    def _p2p(self, tasks: list, src: int, dst: int, direction: str, mb: int, chunk: int,
             stream: str, deps: tuple[int, ...]) -> int:
        if (known := self._calls.get(("p2p", src, dst))) is None:      # every micro-batch's transfer
            plan = self._with_copies("send", (src, dst), self.pp_bytes, ("pp",))
            known = self._calls[("p2p", src, dst)] = (plan, self._participants((src, dst)), self._sm_share(plan))
        # Megatron-LM synchronizes the device after each batched P2P exchange
        # (megatron/core/pipeline_parallel/p2p_communication.py, batch_p2p_sync): the host
        # issues nothing more until the activation or gradient it receives has arrived; unless the
        # schedule overlaps its P2P (overlap_p2p_comm turns batched P2P and that sync off).
        dispatch_s = self.plan.host_dispatch_s
        sync = dispatch_s > 0 and stream.startswith("pp_recv") and not self.plan.p2p_overlapped
        tasks.append(CollectiveTask(f"pp {direction} mb{mb}", f"pp/{direction}/{src}->{dst}/{mb}/{chunk}", known[0],
                                    tuple(d for d in deps if d is not None), stream, "comm", *known[1:], dispatch_s, sync))
        return len(tasks) - 1

    # ------------------------------------------------------------------ ranks

    def stage_order(self, stage: int) -> tuple:
        """The stage's forward / backward passes in schedule order (the compiled step's, when given)."""
        if self.orders is not None:
            return self.orders[stage]
        plan = self.plan
        return tuple(schedule(plan.schedule, stage, plan.placement.pp, plan.micro_batches, plan.chunks_per_stage))

    def rank_tasks(self, rank: int) -> tuple:
        """The rank's tasks; built once for ranks whose tasks depend only on the same groups."""
        program = RankProgram(self, rank)
        peers = program.peers_key()
        if peers is None:
            return program.tasks()
        if peers not in self._peer_tasks:
            self._peer_tasks[peers] = program.tasks()
        return self._peer_tasks[peers]

    def program(self) -> Program:
        tasks = {r: self.rank_tasks(r) for r in self.simulated}
        factors = self._held_factors(tasks)
        self._held_timings.clear()      # their closures hold this builder: freed now, not by the cyclic GC
        return Program(tasks, self.topology.capacity_bytes_per_s, self.topology.resource_names, factors)


def build_program(model: ModelSpec, gpu: GpuSpec, topology: Topology, plan: ParallelPlan,
                  symmetric: bool = True, chunks: tuple[tuple[LayerSpec, ...], ...] | None = None,
                  memo: dict | None = None, orders: tuple | None = None) -> Program:
    """The per-rank program of one step (`chunks`: the model already cut for the plan's pipeline;
    `memo`: the caller's cache of collective plans and timings on this topology; `orders`: each
    stage's passes in schedule order)."""
    return StepBuilder(model, gpu, topology, plan, symmetric, chunks, memo, orders).program()
