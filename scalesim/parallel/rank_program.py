"""One rank's tasks for one optimizer step: its pipeline schedule played into compute and calls.

`StepBuilder` (builder.py) holds what every rank shares (layer timings, collective plans);
`RankProgram` holds one rank's state while its task list grows: its groups, the tasks so far,
the layers already gathered, the reductions the optimizer step waits for. What runs is
described in builder.py's module docstring.
"""

from __future__ import annotations

from dataclasses import replace

from scalesim.collectives.server_share import scale_between_servers
from scalesim.costs.accumulation import grad_accumulation_time_s
from scalesim.costs.host import dispatcher_host_sync, launch_host_s
from scalesim.models.spec import LayerSpec
from scalesim.parallel.experts import expert_groups, experts_whole, network_share
from scalesim.parallel.fsdp import copied_out, hsdp_groups, reduce_input, regathered, replicated
from scalesim.parallel.fsdp_limiter import resharded, unsharding
from scalesim.parallel.megatron_dp import (dense_gathered_bytes, gather_after, gathered, gathered_with_optimizer_step,
                                          reduce_prepared)
from scalesim.parallel.nanotron_dp import (bucket_op, buckets, fp32_buffer_reduced, gathered_copied, shard_copied,
                                           slices_flattened)
from scalesim.parallel.offload import offloaded_step
from scalesim.parallel import optimizer_tail, p2p_batched, step_syncs
from scalesim.parallel.aligned_grad_sync import AlignedGradSync
from scalesim.parallel.pass_templates import PassTemplates
from scalesim.parallel import cp_exchange, fp8_amax, layer_sync, mla_tp, sp_backward, tp_async, tp_overlap
from scalesim.parallel.sp_layout import copies_around, gathered_bytes, layout_copy
from scalesim.program import ComputeTask

PASS_SECONDS = {"forward": "forward_s", "recompute": "recompute_s", "backward": "backward_s"}


class RankProgram:
    """Builds the task list of `rank`; `tasks()` returns it (call once)."""

    def __init__(self, builder, rank: int):
        self.b, self.rank = builder, rank
        self.plan, self.pl = builder.plan, builder.plan.placement
        pl = self.pl
        self.coords = pl.coords(rank)
        self.stage = self.coords["pp"]
        self.tp_group = pl.group("tp", self.coords)
        self.cp_group = pl.group("cp", self.coords)
        self.grad_group, self.replica_group = hsdp_groups(pl, self.coords, self.plan.hsdp_shard)   # fsdp.py
        self.ep_group, self.edp_group = (expert_groups(pl, pl.ep, self.coords) if builder.model.moe is not None
                                         else ((rank,), self.grad_group))
        self.sp = self.plan.sequence_parallel and pl.tp > 1
        self.whole = experts_whole(pl)          # experts not split by tp: MoE on sequence-parallel shards
        moe = builder.model.moe                 # the dispatcher's token-count sync, after each forward route part
        self.moe_sync = self.plan.host_dispatch_s > 0 and moe is not None and dispatcher_host_sync(moe.capacity_factor)
        self.expert_span = ("tp", "dp", "cp") if self.whole else ("dp", "cp")
        # the flex dispatcher sends a token between servers once per server (parallel/experts.py network_share)
        self.ep_share = 1.0 if moe is None else network_share(
            moe, pl.ep, len(builder.topology.ranks_by_server(self.ep_group)), self.plan.moe_dispatcher)
        self.list: list = []
        self.overlapped: list[int] = []         # all-to-alls left to finish under moe_overlap
        self.counters: dict = {}
        self.reductions: list[int] = []
        self.layer_computes: list[int] = []     # first compute task of each layer run, in order
        self.gathered_once: set[str] = set()
        self.free_events: list[int] = []        # FSDP1's rate limiter queue (parallel/fsdp_limiter.py)
        self.dp_buckets: dict = {}              # each layer's Megatron-Core buckets (megatron_dp.layer_buckets)
        self.passes = None                      # the PassTemplates of tasks(), once called
        self.batched = p2p_batched.applies(self.plan)   # P2P in the schedule's batched exchanges
        self.aligned = AlignedGradSync(self)      # interleaved: buckets launched staggered by rank

    def peers_key(self) -> tuple | None:
        """What this rank's tasks depend on, when that is only its groups (no pipeline neighbours,
        no offload copies numbered per rank): ranks with the same key have the very same tasks
        (every rank of plain data parallelism). None when the tasks name the rank itself."""
        if self.pl.pp > 1 or self.plan.offload_params or self.plan.offload_optimizer:
            return None
        return tuple(g if len(g) > 1 else None
                     for g in (self.tp_group, self.cp_group, self.grad_group, self.ep_group, self.edp_group))

    def tasks(self, templates: bool = True) -> tuple:
        """`templates`: replay the passes repeated from one micro-batch to the next (pass_templates.py;
        the same tasks)."""
        passes = self.passes = PassTemplates(self) if templates else None
        last = self.plan.micro_batches - 1
        for kind, mb, local_chunk in self.aligned.passes(self, p2p_batched.passes(self)):  # exchanges between
            g = local_chunk * self.pl.pp + self.stage
            build = self._forward if kind == "F" else self._backward
            if passes is None:
                build(g, mb)
            else:   # a chunk's passes come in micro-batch order; the first and last backward are keyed apart
                later = last - mb if kind == "F" else 0 if mb in (0, last) else last - 1 - mb
                passes.run((kind, g, kind != "F" and mb == last, kind != "F" and mb == 0), mb,
                           lambda: build(g, mb), later)
        self._optimizer_step()
        if passes is not None:
            passes.p = None         # no cycle back to this program: its tasks are freed as soon as dropped
        layer_sync.issue_early(self.list, self.plan.host_dispatch_s)   # parallel/layer_sync.py
        return tuple(self.list)

    # ------------------------------------------------------------------ tasks

    def compute(self, name: str, kind: str, seconds: float, flop: float, deps=(), timing=None,
                host_s: float = 0.0, host_sync: bool = False, held: int | None = None) -> int:
        """Append a compute task; `held` (its Program.held_factors row) when the caller has it, else
        from `timing` (see `layer_timing`; None: no row)."""
        if held is None:
            held = -1 if timing is None else self.b._held_row(timing)
        self.list.append(ComputeTask(name, kind, seconds * self.plan.slowest_gpu_factor,
                                     deps=deps if None not in deps else tuple(d for d in deps if d is not None),
                                     flop=flop, held=held, host_s=host_s, host_sync=host_sync))
        return len(self.list) - 1

    def layer_timing(self, layers: tuple[LayerSpec, ...], kind: str) -> tuple:
        """(row key, content key, seconds with held SMs) of a compute task: see `_held_row`."""
        attribute = PASS_SECONDS[kind]
        b = self.b
        return ((tuple(map(id, layers)), attribute), (tuple((h.kind, h.ops) for h in layers), attribute),
                lambda held_sms, gpu: sum(getattr(b._layer_time(h, held_sms, gpu), attribute) for h in layers))

    def layer_row(self, layers: tuple[LayerSpec, ...], kind: str) -> int:
        """The held_factors row of the layers' `kind` pass (`layer_timing`'s, looked up once per layer kind)."""
        rows = self.b._layer_rows
        key = (tuple(map(id, layers)), kind)
        row = rows.get(key)
        if row is None:
            row = rows[key] = self.b._held_row(self.layer_timing(layers, kind))
        return row

    def call(self, kind: str, op: str, group: tuple[int, ...], size: float, stream: str, deps,
             span: tuple[str, ...] = (), comm: str | None = None) -> int | None:
        return self.b._collective(self.list, self.counters, kind, op, group, size, stream, deps, span, comm)

    def tp_op(self, op: str, deps, kind: str = "forward") -> int | None:
        """A tensor-parallel collective on the block's activations in a `kind` pass; in the batch-first
        layout its sequence-parallel calls come with their layout copies (parallel/sp_layout.py): before
        a reduce-scatter, after an all-gather, both around backward's pair (timed as an all-reduce), and
        a float8 block input is gathered at one byte an element (torchao's, `gathered_bytes`)."""
        copies = copies_around(self)
        size = gathered_bytes(self, op, kind) if copies else self.b.activation_bytes
        if copies and op != "all_gather":
            deps = (layout_copy(self, kind, deps, size),)
        t = self.call("tp", op, self.tp_group, size, "tp", deps, ("tp",))
        if copies and op != "reduce_scatter" and t is not None:
            t = layout_copy(self, kind, (t,), size)
        return t

    def neighbour(self, g: int) -> int:
        """The rank holding global chunk `g` at this rank's tp/cp/dp position."""
        return self.pl.rank(**{**self.coords, "pp": g % self.pl.pp})

    # ------------------------------------------------------------------ layers

    def gather(self, work, kind: str = "forward") -> tuple[int, ...]:
        """All-gather a layer's parameters, at most two layers ahead of compute: before every
        forward and backward under ZeRO-3/FSDP; before its first forward of the step under
        ZeRO-1/2 with overlap_param_gather (the previous step's update, as Megatron-LM runs it)."""
        plan, b = self.plan, self.b
        ahead = unsharding(self, work, kind, gather_after(self))     # parallel/megatron_dp.py, fsdp_limiter.py
        fetched = ()
        if plan.offload_params:
            shards = len(self.grad_group) if plan.zero >= 3 else 1
            ahead = b._fetch(self.list, self.counters, self.rank, work.layer, shards, ahead)
            fetched = (ahead,)
        if len(self.grad_group) <= 1:
            return fetched
        if plan.zero < 3:
            if (not (plan.overlap_param_gather and plan.zero >= 1) or plan.optimizer == "none"
                    or work.layer.name in self.gathered_once):
                return fetched
            self.gathered_once.add(work.layer.name)
        family = "zero3" if plan.zero >= 3 else "zero"
        stored = b._stored(work.layer)      # the experts' share at the bytes the block is gathered in
        experts = stored - dense_gathered_bytes(b, work.layer)
        g = gathered(self, work, family, stored - experts, ahead)     # FSDP2's copy-out: as the unit runs (fsdp.py)
        e = self.call(family + "_experts", "all_gather", self.edp_group, experts, "comm", (ahead,), ("dp", "cp"))
        return fetched + tuple(x for x in (g, e) if x is not None)

    def run_layer(self, work, kind: str, dep: int | None, backward: bool,
                  deps_gather: tuple[int, ...] = ()) -> int | None:
        """Compute (and TP/CP communication) of one layer; returns what the next step waits for."""
        wait = dep
        overlap = tp_overlap.applies(self, work)
        regather = sp_backward.applies(self, work) if kind == "backward" else ()
        early = tp_async.applies(self, work) if kind != "backward" else ()
        for i, part in enumerate(work.parts):
            deps = (dep,) + deps_gather if i == 0 else (wait,)
            if (work.is_block and self.sp and kind != "backward" and not overlap and i not in early
                    and (not work.moe or i <= (0 if self.whole else 1))):
                wait_ag = self.tp_op("all_gather", deps, kind)
                deps = (wait_ag,) if wait_ag is not None else deps
            cp_wait, deps = cp_exchange.before(self, work, i, deps, kind)      # K and V: ring or all-gather
            name = f"{'bwd' if backward else 'fwd'} {work.layer.name}" + (f".{i}" if len(work.parts) > 1 else "")
            sync = self.moe_sync and work.moe and i == 1 and kind != "backward"
            if overlap:             # TE userbuffers: the collectives pipelined into the GEMMs (tp_overlap.py)
                c, wait = tp_overlap.overlapped_half(self, work, i, kind, PASS_SECONDS[kind], deps, name,
                                                     part.forward_flop * (2 if kind == "backward" else 1))
            elif i in early:        # nanotron's async linears: the gather beside the local rows' GEMM (tp_async.py)
                c, wait = tp_async.forward_half(self, work, i, kind, PASS_SECONDS[kind], deps, name, part.forward_flop)
            elif i in regather:     # the input gathered again for the weight gradient (sp_backward.py)
                c, wait = sp_backward.backward_half(self, work, i, deps, name, 2 * part.forward_flop)
            else:
                c = self.compute(name + (" + token-count sync" if sync else ""), kind,
                                 getattr(part, PASS_SECONDS[kind]), part.forward_flop * (2 if kind == "backward" else 1),
                                 deps, host_s=work.host_s[i][kind], host_sync=sync,
                                 held=self.layer_row((work.halves[i],), kind))
                wait = self._after_part(work, kind, i, c)
            if i == 0:
                self.layer_computes.append(c)
            wait = cp_exchange.after(self, work, i, kind, wait, cp_wait)   # parallel/cp_exchange.py
            wait = layer_sync.mark(self, work, kind, i, wait)   # Megatron-DeepSpeed's torch.tensor (layer_sync.py)
        return wait

    def _after_part(self, work, kind: str, i: int, c: int) -> int:
        """The TP collective after part `i` of a layer, and an MoE block's all-to-alls."""
        wait = c = mla_tp.exchanged(self, work, kind, c) if i == 0 and work.is_block else c   # parallel/mla_tp.py
        last = i == len(work.parts) - 1
        if work.is_block and self.pl.tp > 1 and (not work.moe or i == 0 or last and not (self.whole and self.sp)):
            t = self.tp_op("reduce_scatter" if self.sp and kind != "backward" else "all_reduce", (c,), kind)
            wait = t if t is not None else wait
        if work.moe and i in (1, 2) and self.pl.ep > 1:
            a = self.call("ep_dispatch" if i == 1 else "ep_combine", "all_to_all", self.ep_group, self.b.a2a_bytes,
                          "ep", (wait,), self.expert_span, "ep")
            if a is not None and self.ep_share < 1.0:
                self.list[a] = self._server_shared(self.list[a])
            if a is not None and self.plan.moe_overlap:
                self.overlapped.append(a)
            elif a is not None:
                wait = a
        return wait

    def _server_shared(self, task):
        """The all-to-all `task` with its traffic between servers cut to `ep_share` (kept per plan)."""
        key = ("server-share", id(task.plan), self.ep_share)
        known = self.b.memo.get(key)
        if known is None or known[0] is not task.plan:
            known = self.b.memo[key] = (task.plan, scale_between_servers(task.plan, self.b.topology, self.ep_share))
        return replace(task, plan=known[1])

    # ------------------------------------------------------------------ passes

    def _forward(self, g: int, mb: int) -> None:
        dep = None
        if g > 0 and not self.batched:
            dep = self.b._p2p(self.list, self.neighbour(g - 1), self.rank, "act", mb, g, "pp_recv_prev", ())
        held = gathered_with_optimizer_step(self, g, mb)       # parallel/megatron_dp.py
        for w in self.b.chunk_work[g]:
            dep = resharded(self, w, "forward", self.run_layer(w, "forward", dep, False,
                                                               copied_out(self, w, self.gather(w)) + held))
            held = ()
        dep = fp8_amax.reduced(self, g, "forward", dep)     # delayed scaling's amax all-reduce (parallel/fp8_amax.py)
        if g < self.plan.chunks - 1 and not self.batched:
            self.b._p2p(self.list, self.rank, self.neighbour(g + 1), "act", mb, g + 1, "pp_send_next", (dep,))

    def _backward(self, g: int, mb: int) -> None:
        plan, b = self.plan, self.b
        work = b.chunk_work[g]
        dep = None
        if g < plan.chunks - 1 and not self.batched:
            dep = b._p2p(self.list, self.neighbour(g + 1), self.rank, "grad", mb, g, "pp_recv_next", ())
        final = mb == plan.micro_batches - 1
        pending = buckets(self, work) if final and plan.zero < 3 and len(self.grad_group) > 1 else []
        # ZeRO-3's backward all-gather of the next unit (FSDP's backward prefetch): none = issued when
        # that unit's backward starts, so it queues on the NCCL stream behind this unit's reduce-scatter;
        # pre / post = issued in this unit's pre- / post-backward hook (torch fsdp/_runtime_utils.py
        # _pre_backward_hook, _post_backward_reshard -> _prefetch_handle), ahead of its reduce-scatter.
        order = tuple(reversed(work))
        prefetch = plan.fsdp_backward_prefetch if plan.zero >= 3 else "none"
        gathered = None
        for position, w in enumerate(order):
            gathered = regathered(self, w) if gathered is None else gathered     # parallel/fsdp.py
            ahead = order[position + 1] if prefetch != "none" and position + 1 < len(order) else None
            following = regathered(self, ahead) if ahead is not None and prefetch == "pre" else None
            dep = resharded(self, w, "backward", self._layer_backward(w, dep, copied_out(self, w, gathered)))
            if ahead is not None and prefetch == "post":
                following = regathered(self, ahead)
            gathered = following
            self._reduce_layer(w, dep, final)
            while plan.overlap_grad_reduce and not self.aligned.on and pending and pending[0][1] == position:
                size, _, calls = pending.pop(0)
                self._reduce_bucket(size, dep, calls)
        for size, _, calls in self.aligned.hold(g, pending, dep):
            self._reduce_bucket(size, dep, calls)
        dep = step_syncs.loss_checked(self, g, mb, fp8_amax.reduced(self, g, "backward", dep))   # HF Trainer
        fp32_buffer_reduced(self, work, self._accumulate(work, dep, mb), final)     # nanotron without DDP
        if g > 0 and not self.batched:
            b._p2p(self.list, self.rank, self.neighbour(g - 1), "grad", mb, g - 1, "pp_send_prev", (dep,))

    def _accumulate(self, work, dep: int | None, mb: int) -> int | None:
        """The micro-batch's gradients added into the fp32 buffers (autograd-add: param.grad, from the second
        on), when that is a pass of its own (plan.grad_accumulation, costs/accumulation.py): after the backward."""
        plan, b = self.plan, self.b
        if plan.grad_accumulation == "fused" or plan.grad_accumulation == "autograd-add" and mb == 0:
            return dep
        # ZeRO-3 reduce-scatters every micro-batch's gradients: what is added is the rank's 1/shards of them
        params = sum(b._trained(w.layer) for w in work) / (len(self.grad_group) if plan.zero >= 3 else 1)
        timing = (("accumulate", params), ("accumulate", params), lambda held_sms, gpu: grad_accumulation_time_s(
            params, gpu, plan.precision, plan.grad_accumulation, held_sms))
        return self.compute("gradient accumulation", "optimizer", timing[2](0, b.gpu), 0.0, (dep,), timing=timing,
                     host_s=launch_host_s(len(work), plan.host_dispatch_s, False))

    def _layer_backward(self, w, dep: int | None, gathered: tuple[int, ...]) -> int | None:
        """Recompute (full or selective checkpointing), then the layer's backward, once its parameters
        are `gathered`."""
        checkpointing = self.plan.checkpointing if w.recomputed else "none"     # partial recompute
        # Megatron's "moe" recompute module re-runs the MoE layer whole: its all-to-alls and token-count sync
        if checkpointing == "full" or checkpointing == "selective" and w.moe and "moe" in self.plan.recompute_modules:
            dep = self.run_layer(w, "recompute", dep, True, gathered)
            gathered = ()
        elif checkpointing in ("selective", "selective-op"):
            seconds = sum(p.recompute_s for p in w.parts)
            if seconds > 0:
                dep = mla_tp.replayed(self, w, self._regather(w, checkpointing, dep))
                dep = self.compute(f"recompute {w.layer.name}", "recompute", seconds, 0.0,
                                   (dep,) + gathered, host_s=sum(h["recompute"] for h in w.host_s),
                                   held=self.layer_row(w.halves, "recompute"))
                gathered = ()
        return self.run_layer(w, "backward", dep, True, gathered)

    def _regather(self, w, checkpointing: str, dep: int | None) -> int | None:
        """Per-op selective checkpointing with sequence parallelism gathers each block half's input again:
        torchtitan's policy saves reduce-scatter outputs and every other mm but not all-gathers, so
        recomputing wk and w3 (the 2nd and 6th mm) needs the attention and MLP inputs gathered anew
        (torchtitan models/llama3/parallelize_llama.py _save_list and _custom_policy, @820504e)."""
        if checkpointing != "selective-op" or not self.sp or not w.is_block:
            return dep
        for _ in w.parts[:2]:
            gathered = self.tp_op("all_gather", (dep,), "recompute")
            dep = dep if gathered is None else gathered
        return dep

    def _reduce_layer(self, w, dep: int | None, final: bool) -> None:
        """ZeRO-3 reduce-scatters each layer's gradients; expert gradients go over the
        expert-data-parallel ranks as each layer finishes."""
        plan, b = self.plan, self.b
        expert = b._expert_trained(w.layer)
        if plan.zero >= 3 and len(self.grad_group) > 1:
            ready = reduce_input(self, w, b._trained(w.layer) - expert, dep)
            self.reductions.append(self.call("grad", "reduce_scatter", self.grad_group,
                                             (b._trained(w.layer) - expert) * b.grad_bytes_per_param, "comm",
                                             (ready,), ("dp", "cp")))
            replicated(self, b._trained(w.layer) - expert)       # HSDP: across the replicas (fsdp.py)
        if expert and (plan.zero >= 3 or final):
            self.reductions.append(self.call("expert_grad", "reduce_scatter" if plan.zero >= 1 else "all_reduce",
                                             self.edp_group, expert * b.grad_bytes_per_param, "comm", (dep,),
                                             self.expert_span))

    def _reduce_bucket(self, size: float, dep: int | None, calls: int = 1) -> None:
        """One DDP bucket's reduction, as `calls` collectives of equal size."""
        op = bucket_op(self.plan)           # nanotron's plain DDP at ZeRO-1 all-reduces (parallel/nanotron_dp.py)
        dep = slices_flattened(self, size, reduce_prepared(self, size, dep))
        for _ in range(calls):
            self.reductions.append(self.call("grad", op, self.grad_group, size / calls, "comm", (dep,),
                                             ("dp", "cp")))
        shard_copied(self, size, self.reductions[-1])

    def _tied_reduce(self, deps: tuple[int, ...]) -> int | None:
        """The tied word embeddings' gradient summed between the first and the last pipeline stage
        once their backward and gradient reductions are done, before the update; not overlapped.
        nanotron: trainer.py training_step calls sync_tied_weights_gradients (parallel/tied_parameters.py,
        an all_reduce_coalesced of the fp32 gradient buffers) after the pipeline ('TODO: Put this in hooks
        so we can overlap communication', @67c5ebb6); Megatron-LM: finalize_model_grads
        _allreduce_word_embedding_grads after finish_grad_sync."""
        b, pl, model = self.b, self.pl, self.b.model
        tied = any(layer.name == "lm_head" and layer.params == 0 for layer in model.layers)
        if not tied or pl.pp <= 1 or self.stage not in (0, pl.pp - 1) or self.plan.finetune is not None:
            return None
        size = (model.vocab or 0) * (model.hidden or 0) // pl.tp * b.grad_bytes_per_param
        group = (self.neighbour(0), self.neighbour(pl.pp - 1))
        return self.call("tied", "all_reduce", group, size, "comm", deps, ("pp",))

    def _optimizer_step(self) -> None:
        """The update of this rank's shard (on the GPU, or offloaded), then ZeRO-1/2's all-gather."""
        plan, pl, b = self.plan, self.pl, self.b
        local_works = [w for c in range(plan.chunks_per_stage) for w in b.chunk_work[c * pl.pp + self.stage]]
        experts_local = sum(b._expert_trained(w.layer) for w in local_works)
        params_local = sum(b._trained(w.layer) for w in local_works) - experts_local    # dense part
        shard = len(self.grad_group) if plan.zero >= 1 else 1
        expert_shard = len(self.edp_group) if plan.zero >= 1 else 1
        done = tuple(r for r in self.reductions + self.overlapped if r is not None)
        done += tuple(r for r in (self._tied_reduce(done),) if r is not None)
        params = params_local / shard + experts_local / expert_shard
        if plan.offload_optimizer:
            opt = offloaded_step(b, self.list, self.rank, params, done)
        else:       # on the GPU, split at the gradient-norm read where the step clips on the host
            opt = optimizer_tail.updated(self, params, local_works, done)
        if 1 <= plan.zero <= 2 and not plan.overlap_param_gather and plan.optimizer != "none":   # no update
            # the updated parameters at the bytes they are gathered in (fp8_param_gather: the blocks' in FP8)
            per_param = [b.weight_bytes_per_param if plan.finetune is not None else
                         plan.gathered_bytes_per_param(w.layer, b.weight_bytes_per_param) for w in local_works]
            dense = sum((b._trained(w.layer) - b._expert_trained(w.layer)) * bpp
                        for w, bpp in zip(local_works, per_param))
            gathered = self.call("zero", "all_gather", self.grad_group, dense, "comm", (opt,), ("dp", "cp"))
            gathered_copied(self, local_works, params_local, gathered)
            self.call("zero_experts", "all_gather", self.edp_group,
                      sum(b._expert_trained(w.layer) * bpp for w, bpp in zip(local_works, per_param)),
                      "comm", (opt,), ("dp", "cp"))
