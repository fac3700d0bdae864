"""From a serving scenario to latency, throughput and cost: resolve, check, time, simulate, summarise.

Wiring only (the CLI calls it): the iteration's GPU time comes from
`scalesim.costs.inference`, its tensor- and pipeline-parallel transfers from
`scalesim.collectives` on the scenario's topology, the request-level play-out
from `scalesim.engine.serving`, the policy from `scalesim.serving`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalesim.app.clusters import too_many_gpus
from scalesim.app.serve_costs import per_million_tokens
from scalesim.collectives import plan_collective, plan_time_s
from scalesim.costs import economics as econ
from scalesim.costs.inference import (ACTIVATION_BYTES, BLOCK_TOKENS, ServingShard, activation_workspace_bytes,
                                      attention_iteration_s, dense_iteration_s, iteration_work, kv_bytes_per_token,
                                      kv_cache_bytes, kv_cache_blocks, kv_window, weight_bytes_per_gpu,
                                      windowed_iteration_work)
from scalesim.costs.memory import FRAMEWORK_OVERHEAD_BYTES
from scalesim.engine.serving import simulate_serving
from scalesim.errors import InputError
from scalesim.limits import check_serving_size
from scalesim.hardware import GpuSpec
from scalesim.hardware.user_catalog import Catalog
from scalesim.models import get_model
from scalesim.serving.metrics import meets_slo, summarise
from scalesim.serving.scheduler import Batch, Scheduler, window_blocks
from scalesim.serving.spec import ServingScenario
from scalesim.serving.workload import generate
from scalesim.topology import NodeDesign, Topology, build_cluster, load_node_design
from scalesim.units import format_bytes

# Host (CPU) time per iteration that the GPU waits for: scheduling, input preparation,
# sampling bookkeeping and detokenisation not overlapped with the forward pass. ESTIMATED:
# Hugging Face measured the GPU idle 24% of the runtime waiting for the CPU in synchronous
# continuous batching of an 8B model at batch 32 on H200 (transformers' "asynchronous
# continuous batching" blog post, 2025); with a decode step of ~4 ms there (8B in bf16 over
# 4.8 TB/s) that is ~1 ms per step. vLLM V1 overlaps much of this (async scheduling), so we
# take half: 0.5 ms. Not fitted to any case; overridable per scenario (serving.host_overhead_ms).
HOST_OVERHEAD_S = 0.5e-3
# Rate search without --rates: at most this many requests per probe, and a 5% bracket.
SEARCH_REQUESTS = 400
SEARCH_TOLERANCE = 0.05
SEARCH_PROBES_MAX = 18      # max_rate_under_slo: 12 doublings or halvings, then bisection from 2x to 5%
SEARCH_FULL_RUNS = 6        # then the rate found is checked with all the scenario's requests, stepping down


@dataclass(frozen=True)
class ServeSetup:
    scenario: ServingScenario
    file: str | None
    shard: ServingShard
    gpu: GpuSpec
    topology: Topology
    gpus: int                       # GPUs serving: replicas x tp x pp
    replicas: int
    kv_blocks: int                  # per replica (the KV cache of each GPU holds its share of every token)
    memory: dict = field(default_factory=dict)
    reason: str | None = None       # why it does not fit (None: it fits)
    catalog: Catalog | None = None  # --catalog / $SCALESIM_CATALOG folders over the built-in one


def _check_plan(scenario: ServingScenario, model, design: NodeDesign, file: str | None) -> int:
    """GPUs used, after refusing plans vLLM would refuse (naming the key and what works)."""
    s = scenario.serving
    available = scenario.cluster.nodes * design.gpus        # build_cluster: `nodes` copies of the design
    count = scenario.cluster.gpus or available

    def bad(key: str, message: str) -> InputError:
        return InputError(message, file=file, key=key)

    if count > available:
        raise bad("cluster.gpus", too_many_gpus(count, scenario.cluster.nodes, design))
    if not model.num_layers or model.tokens_per_sample is None or model.family in ("bert", "vit"):
        raise bad("model", f"serving needs a decoder transformer; {model.name} is not one")
    if model.moe is not None:
        raise bad("model", f"{model.name} is a mixture-of-experts model; serving models dense decoder "
                  "transformers only (its expert GEMMs, routing and expert weights are not modelled yet); "
                  "allowed: a dense model ('all' active parameters in scalesim models; MoE training: scalesim run)")
    if s.ep > 1:
        raise bad("serving.ep", "expert parallelism needs a mixture-of-experts model, which serving does not "
                  "model yet; use ep: 1")
    if s.tp * s.pp > count or count % (s.tp * s.pp):
        raise bad("serving.tp", f"tp x pp = {s.tp} x {s.pp} must divide the {count} GPUs (replicas fill them); "
                  f"allowed tp x pp: {', '.join(str(d) for d in range(1, count + 1) if count % d == 0)}")
    if model.heads % s.tp:
        raise bad("serving.tp", f"tp ({s.tp}) must divide the attention heads ({model.heads})")
    kv = model.kv_heads or model.heads
    if kv % s.tp and s.tp % kv:
        raise bad("serving.tp", f"tp ({s.tp}) and the key/value heads ({kv}) must divide one another")
    if s.pp > model.num_layers:
        raise bad("serving.pp", f"pp ({s.pp}) exceeds the model's {model.num_layers} layers")
    return count


def prepare_serving(scenario: ServingScenario, file: str | None = None,
                    catalog: Catalog | None = None) -> ServeSetup:
    """Resolve names (in `catalog`: the built-in one), check the plan and size the KV cache (does not simulate)."""
    design = load_node_design(scenario.cluster.node, key="cluster.node", file=file, catalog=catalog)
    fabric = scenario.cluster.fabric
    topology = build_cluster(design, nodes=scenario.cluster.nodes, catalog=catalog,
                             fabric=None if fabric is None else fabric.as_fabric())
    model = get_model(scenario.model, seq_len=1, key="model", file=file)
    count = _check_plan(scenario, model, design, file)
    _check_context(scenario, file)
    s = scenario.serving
    shard = ServingShard(model, s.tp, s.pp, s.weights, s.kv_cache)
    gpu = topology.gpu_spec
    free = kv_cache_bytes(shard, gpu.memory_bytes, s.max_batch_tokens, s.max_seqs, s.gpu_memory_utilization,
                          s.kv_cache_free_memory_fraction)
    blocks = kv_cache_blocks(free, shard)
    memory = {"weights": weight_bytes_per_gpu(shard),
              "activations": activation_workspace_bytes(shard, s.max_batch_tokens, s.max_seqs),
              "framework": FRAMEWORK_OVERHEAD_BYTES, "kv_cache": blocks * BLOCK_TOKENS * kv_bytes_per_token(shard)}
    return ServeSetup(scenario, file, shard, gpu, topology, count, count // (s.tp * s.pp), blocks, memory,
                      _fit_reason(scenario, shard, gpu, memory, blocks), catalog)


def _fit_reason(scenario: ServingScenario, shard: ServingShard, gpu: GpuSpec, memory: dict,
                blocks: int) -> str | None:
    s = scenario.serving
    usable = gpu.memory_bytes * s.gpu_memory_utilization
    longest = _longest_request(scenario)
    window, layers = kv_window(shard.model)
    held = window_blocks(longest, longest - 1, window, layers / shard.model.num_layers) if window else None
    if blocks * BLOCK_TOKENS >= longest or held is not None and blocks >= held:
        return None
    need = memory["weights"] + memory["activations"] + memory["framework"]
    return (f"weights {format_bytes(memory['weights'])}, activations {format_bytes(memory['activations'])} and "
            f"framework {format_bytes(memory['framework'])} per GPU leave "
            f"{format_bytes(max(usable - need, 0.0))} of the {format_bytes(usable)} usable on the {gpu.full_name} "
            f"(serving.gpu_memory_utilization {s.gpu_memory_utilization}) for the KV cache, which must hold the "
            f"longest request ({longest:,} tokens); raise serving.tp (now {s.tp}) or pp, use smaller weights "
            f"(serving.weights: fp8 or int4) or lower serving.max_batch_tokens")


def _check_context(scenario: ServingScenario, file: str | None) -> None:
    """A request longer than the model's learned position table (GPT-2's 1,024) cannot be served: vLLM
    refuses it. Rotary models have no hard limit here (as in training: models/zoo.py max_seq_len)."""
    longest = _longest_request(scenario)
    try:
        get_model(scenario.model, seq_len=longest, key="model", file=file)
    except InputError as exc:       # the learned position table (the model itself was resolved already)
        raise InputError(f"the longest request (prompt + output) is {longest:,} tokens, but {exc.detail.split(';')[0]}; "
                         "allowed: requests of at most that many tokens (prompt_tokens and output_tokens whose max "
                         "add up to it)", file=file, key="serving.requests") from None


def _longest_request(scenario: ServingScenario) -> int:
    reqs = generate(scenario.serving.requests, rate_per_s=1.0)
    return max(r.prompt_tokens + r.output_tokens for r in reqs)


class IterationTimer:
    """Time of one iteration on one replica: every stage's GPU work, its collectives and the host's share.

    Caches what depends only on the token count (GEMMs, all-reduces); the caches
    belong to this object, one per simulation setup.
    """

    def __init__(self, setup: ServeSetup):
        self.setup = setup
        s = setup.scenario.serving
        self.host_s = HOST_OVERHEAD_S if s.host_overhead_ms is None else s.host_overhead_ms * 1e-3
        self.overlap = s.overlap_scheduler      # host work hidden behind the GPU's next iteration
        self.dense: dict[tuple[int, int], float] = {}
        self.comm: dict[int, float] = {}
        self.window, self.windowed_layers = kv_window(setup.shard.model)    # sliding windows (models/windows.py)

    def __call__(self, batch: Batch) -> float:
        return self.of_entries(batch.entries)

    def of_entries(self, entries) -> float:
        work = iteration_work(entries)
        shard, gpu = self.setup.shard, self.setup.gpu
        key = (work.tokens, work.sampled)
        if key not in self.dense:
            self.dense[key] = dense_iteration_s(work.tokens, work.sampled, shard, gpu) + self._comm_s(work.tokens)
        windowed = windowed_iteration_work(entries, self.window) if self.window else None
        gpu_s = self.dense[key] + attention_iteration_s(work, shard, gpu, windowed, self.windowed_layers)
        return max(gpu_s, self.host_s) if self.overlap else gpu_s + self.host_s

    def _comm_s(self, tokens: int) -> float:
        """Two tensor-parallel all-reduces per layer and a send between consecutive stages, per
        iteration, for the token count rounded up to 16 steps per doubling."""
        shard = self.setup.shard
        if shard.tp == 1 and shard.pp == 1:
            return 0.0
        step = 1 << max(0, tokens.bit_length() - 4)
        bucket = -(-tokens // step) * step
        if bucket not in self.comm:
            topo = self.setup.topology
            size = bucket * shard.model.hidden * ACTIVATION_BYTES
            total = 0.0
            if shard.tp > 1:
                plan = plan_collective("all_reduce", topo, tuple(range(shard.tp)), size)
                total += 2 * shard.model.num_layers * plan_time_s(plan, topo.capacity_bytes_per_s)
            if shard.pp > 1:
                plan = plan_collective("send", topo, (0, shard.tp), size)
                total += (shard.pp - 1) * plan_time_s(plan, topo.capacity_bytes_per_s)
            self.comm[bucket] = total
        return self.comm[bucket]


def simulate_load(setup: ServeSetup, timer: IterationTimer, *, rate_per_s: float | None = None,
                  count: int | None = None) -> dict:
    """One simulation at the scenario's load, or open-loop at `rate_per_s`; latency, throughput, KV use."""
    s = setup.scenario.serving
    spec = s.requests if count is None else s.requests.model_copy(update={"count": min(count, s.requests.count)})
    requests = generate(spec, rate_per_s=rate_per_s)
    window, layers = kv_window(setup.shard.model)          # vLLM frees the blocks a window leaves behind
    schedulers = [Scheduler(setup.kv_blocks, s.max_batch_tokens, s.max_seqs, guaranteed=s.admission == "guaranteed",
                            window=window, windowed=layers / setup.shard.model.num_layers)
                  for _ in range(setup.replicas)]
    closed = rate_per_s is None and spec.concurrency is not None
    run = simulate_serving(requests, schedulers, timer, router=s.router,
                           concurrency=spec.concurrency if closed else None)
    out = summarise(list(run.records))
    span = out["span_s"] or run.end_s or 1e-12
    out.update({
        "rate_per_s": rate_per_s if rate_per_s is not None else spec.rate_per_s,
        "concurrency": spec.concurrency if closed else None,
        "kv_cache_peak_fraction": max(sch.peak_blocks for sch in schedulers) / max(setup.kv_blocks, 1),
        "preemptions": sum(sch.preemptions for sch in schedulers),
        "gpu_busy_fraction": min(sum(run.busy_s) / (setup.replicas * span), 1.0),
        "iterations": run.iterations,
        "meets_slo": meets_slo(out, s.slo.ttft_s, s.slo.tpot_s),
    })
    out["cost_per_million_tokens_usd"], out["energy_kwh_per_million_tokens"] = per_million_tokens(
        setup, out["output_tokens_per_s"], out["gpu_busy_fraction"])
    tokens_per_s = out["output_tokens_per_s"]
    out["gpu_hours_per_million_tokens"] = (setup.gpus * 1e6 / tokens_per_s / econ.SECONDS_PER_HOUR
                                           if tokens_per_s > 0 else None)
    return out


def max_rate_under_slo(setup: ServeSetup, timer: IterationTimer, rates: list[float] | None,
                       start_rate: float) -> tuple[float | None, list[dict]]:
    """The highest open-loop rate whose P99 TTFT and TPOT meet the SLO, and the points simulated:
    over `rates` when given, else by doubling from `start_rate` and bisecting to 5%."""
    if rates:
        points = [simulate_load(setup, timer, rate_per_s=r) for r in sorted(rates)]
        ok = [p["rate_per_s"] for p in points if p["meets_slo"]]
        return (max(ok) if ok else None), points
    if _slo_out_of_reach(setup, timer):
        return None, []
    probe = {}

    def meets(rate: float) -> bool:
        probe[rate] = simulate_load(setup, timer, rate_per_s=rate, count=SEARCH_REQUESTS)
        return probe[rate]["meets_slo"]

    lo, hi = None, None
    rate = start_rate
    for _ in range(12):
        if meets(rate):
            lo, rate = rate, rate * 2
            if hi is not None:
                break
        else:
            hi, rate = rate, rate / 2
            if lo is not None:
                break
        if lo is not None and hi is not None:
            break
    while lo is not None and hi is not None and (hi - lo) / lo > SEARCH_TOLERANCE:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    if lo is not None:
        lo = _confirmed_with_all_requests(setup, timer, probe, lo, hi)
    return lo, [probe[r] for r in sorted(probe)]


def _confirmed_with_all_requests(setup: ServeSetup, timer: IterationTimer, probe: dict, lo: float,
                                 hi: float | None) -> float | None:
    """The highest rate at or below `lo` (met on the short probes) that meets the SLO with all the
    scenario's requests, to 5%: near saturation the queue grows slowly, and a rate the first
    SEARCH_REQUESTS meet can miss over the whole load (the row shown for the rate would then say
    "missed"). Steps down to the highest shorter probe that met (else half), then bisects with full
    runs; at most SEARCH_FULL_RUNS of them. Each full run replaces the probe at its rate in `probe`."""
    met, missed, rate = None, None, lo
    for _ in range(SEARCH_FULL_RUNS):
        probe[rate] = simulate_load(setup, timer, rate_per_s=rate)
        if probe[rate]["meets_slo"]:
            met = rate
            if missed is None or (missed - met) / met <= SEARCH_TOLERANCE:
                break
            rate = (met + missed) / 2
        else:
            missed = rate
            if met is not None:
                if (missed - met) / met <= SEARCH_TOLERANCE:
                    break
                rate = (met + missed) / 2
            else:
                below = [r for r in probe if r < rate and probe[r]["meets_slo"]]
                rate = max(below) if below else rate / 2
    return met


def _slo_out_of_reach(setup: ServeSetup, timer: IterationTimer) -> bool:
    """Whether no rate can meet the SLO: every first token and every next one takes at least one
    iteration, and none is shorter than one token's alone (so the search would only halve the rate
    twelve times in vain)."""
    slo, outputs = setup.scenario.serving.slo, setup.scenario.serving.requests.output_tokens
    shortest = timer.of_entries([(1, 1, True)])
    return shortest > slo.ttft_s or (shortest > slo.tpot_s and outputs.mean >= 2)


def serve(scenario: ServingScenario, file: str | None = None, *, rates: list[float] | None = None,
          search: bool = True, catalog: Catalog | None = None) -> dict:
    """Simulate the scenario's load (and the rate sweep or search); the `serve --json` object."""
    s = scenario.serving
    prompt, output = (min(d.mean, d.max or d.mean) for d in (s.requests.prompt_tokens, s.requests.output_tokens))
    check_serving_size(count=s.requests.count, prompt_tokens=prompt, output_tokens=output,
                       max_batch_tokens=s.max_batch_tokens, rates=len(rates or []), search=search,
                       search_requests=SEARCH_REQUESTS, search_probes=SEARCH_PROBES_MAX,
                       search_full_runs=SEARCH_FULL_RUNS, file=file)
    setup = prepare_serving(scenario, file, catalog)
    out = {"scenario": scenario.name, "gpus": setup.gpus, "replicas": setup.replicas, "gpu": setup.gpu.name,
           "plan": {"tp": s.tp, "pp": s.pp, "ep": s.ep, "weights": s.weights, "kv_cache": s.kv_cache,
                    "max_batch_tokens": s.max_batch_tokens, "max_seqs": s.max_seqs, "router": s.router,
                    "admission": s.admission},
           "fits": setup.reason is None, "reason": setup.reason,
           "memory_per_gpu_bytes": sum(setup.memory.values()), "memory_breakdown_bytes": setup.memory,
           "memory_capacity_bytes": setup.gpu.memory_bytes,
           "kv_cache_tokens": setup.kv_blocks * BLOCK_TOKENS, "slo": s.slo.model_dump()}
    if setup.reason is not None:
        return {**out, **{k: None for k in ("ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s",
                                            "requests_per_s", "kv_cache_peak_fraction", "preemptions",
                                            "max_rate_under_slo", "cost_per_million_tokens_usd",
                                            "energy_kwh_per_million_tokens", "gpu_hours_per_million_tokens")},
                "sweep": []}
    timer = IterationTimer(setup)
    main = simulate_load(setup, timer)
    out.update(main)
    out["single_request"] = single_request_times(setup, timer)
    best, points = (max_rate_under_slo(setup, timer, rates, main["requests_per_s"] or 1.0)
                    if rates or search else (None, []))
    out["max_rate_under_slo"] = best
    out["sweep"] = [_sweep_row(p) for p in points]
    out["assumptions"] = assumptions(setup, timer)
    return out


def _sweep_row(point: dict) -> dict:
    keys = ("rate_per_s", "requests", "ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "requests_per_s",
            "kv_cache_peak_fraction", "preemptions", "meets_slo", "cost_per_million_tokens_usd",
            "gpu_hours_per_million_tokens")
    return {k: point[k] for k in keys}


def single_request_times(setup: ServeSetup, timer: IterationTimer) -> dict:
    """One mean-length prompt's prefill and one decode step right after it, alone on a replica."""
    spec = setup.scenario.serving.requests
    prompt = max(1, round(spec.prompt_tokens.mean))
    done, prefill = 0, 0.0
    while done < prompt:
        q = min(setup.scenario.serving.max_batch_tokens, prompt - done)
        done += q
        prefill += timer.of_entries([(q, done, done == prompt)])
    return {"prompt_tokens": prompt, "prefill_s": prefill, "decode_step_s": timer.of_entries([(1, prompt + 1, True)])}


def assumptions(setup: ServeSetup, timer: IterationTimer) -> list[dict]:
    s = setup.scenario.serving
    return [
        {"input": "host overhead per iteration (s)", "value": timer.host_s,
         "source": "scenario" if s.host_overhead_ms is not None else "estimate (scalesim/app/serve.py HOST_OVERHEAD_S)"},
        {"input": "host work overlapped with the GPU", "value": s.overlap_scheduler,
         "source": "scenario (serving.overlap_scheduler): an iteration takes the longer of GPU and host time"
         if s.overlap_scheduler else "no: an iteration takes GPU time plus host time"},
        {"input": "KV cache block (tokens)", "value": BLOCK_TOKENS, "source": "vLLM default --block-size"},
        {"input": "KV cache memory", "value": s.gpu_memory_utilization if s.kv_cache_free_memory_fraction is None
         else s.kv_cache_free_memory_fraction,
         "source": "share of all GPU memory, less weights and workspace (serving.gpu_memory_utilization, vLLM "
                   "default 0.9)" if s.kv_cache_free_memory_fraction is None
         else "share of the memory left after weights and workspace (serving.kv_cache_free_memory_fraction, "
              "TensorRT-LLM)"},
        {"input": "GEMM efficiency (large GEMMs)", "value": setup.gpu.gemm_efficiency,
         "source": "catalog measurement (gpus.yaml)"},
        *([{"input": "sustained clock under load (fraction of the clock the GEMM efficiency is stated at)",
            "value": setup.gpu.training_clock_fraction,
            "source": "catalog training_clock_fraction (gpus.yaml notes: power-limited clocks)"}]
          if setup.gpu.training_clock_fraction != 1.0 else []),
        {"input": "pipeline stages", "value": s.pp,
         "source": "one batch at a time through the stages (no micro-batch pipelining across iterations)"},
    ]
