"""Bounds on what a user may ask for, each with the reason it exists, and a wall-clock guard.

scalesim plays every task of a step (per layer, micro-batch and simulated
rank) and builds every GPU, NIC and switch of a cluster as a graph, so the
time to answer grows with those counts. A typo (a million nodes, a batch
given in tokens, a hidden size of 2^63) would otherwise run for hours. Values
far beyond any real system are refused (InputError: the key, the limit and
why); a plan whose step would take more than about a minute to play out is
refused with the keys that drive it, and in the commands (`answer_budget`)
one that would take more than about 10 s unless `--max-seconds` allows it;
`time_limit` stops a run that takes longer than the caller allows
(`scalesim run --max-seconds`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import time
from collections.abc import Iterator
from typing import Any

from scalesim.errors import InputError

# (low, high, why), by key path. `None`: no bound on that side.
_SAMPLES = "far beyond published batch sizes (LLMs: a few thousand sequences; ImageNet records: 65,536 images)"
_CLUSTER = ("scalesim builds every GPU, NIC and switch of the cluster as a graph and plays every flow of its "
            "collectives: 32,768 GPUs (twice Llama 3 405B's 16,384) take about 10 s; larger clusters are not "
            "simulated (not reduced by symmetry yet)")
SCENARIO_LIMITS: dict[str, tuple[float | None, float | None, str]] = {
    "cluster.nodes": (None, 4096, _CLUSTER),
    "cluster.gpus": (None, 32768, _CLUSTER),
    "cluster.fabric.nics_per_node": (None, 576, "a node carries at most one compute NIC per GPU (8 on a DGX H100, "
                                     "72 on a GB200 NVL72 rack, a 576-GPU NVLink domain at most); every port is a "
                                     "graph vertex"),
    "cluster.fabric.oversubscription": (None, 64, "real fabrics are 1:1 to a few to one"),
    "training.global_batch": (None, 2**24, _SAMPLES),
    "training.micro_batch": (None, 2**24, _SAMPLES),
    "training.seq_len": (None, 2**24, "16x the longest published training contexts (1M tokens)"),
    "training.tokens": (None, 1e16, "over 600x the largest published training budgets (Llama 3: 15.6T tokens)"),
    "training.epochs": (None, 1e5, "training runs take a few to a few hundred epochs"),
    "training.dataset_samples": (None, 1e13, "over 1,000x the largest public datasets (LAION-5B: 5.85e9 samples)"),
    "model.layers": (None, 1024, "the deepest published transformers have about 100-130 blocks (GPT-3: 96; "
                     "Megatron-LM's 1T: 128), and every block of every micro-batch is a simulated task"),
    "model.hidden": (None, 2**17, "5x the widest published model (Megatron-LM's 1T: 25,600); parameters "
                     "grow with its square"),
    "model.heads": (None, 2**14, "published models use up to 128 heads"),
    "model.kv_heads": (None, 2**14, "published models use up to 128 heads"),
    "model.ffn_hidden": (None, 2**20, "over 10x the widest published MLPs (PaLM 540B: 73,728)"),
    "model.vocab": (None, 2**22, "over 16x the largest published vocabularies (Gemma: 256,000)"),
    "pricing.gpu_hour_usd": (None, 1e3, "cloud GPU hours cost a few dollars"),
    "pricing.electricity_usd_per_kwh": (None, 100, "electricity costs cents per kWh"),
    "pricing.ownership.gpu_usd": (None, 1e7, "a GPU costs thousands to tens of thousands of dollars"),
    "pricing.ownership.server_usd": (None, 1e8, "a server costs thousands to hundreds of thousands of dollars"),
    "pricing.ownership.network_usd_per_node": (None, 1e8, "a node's network share costs thousands of dollars"),
    "pricing.ownership.host_power_w": (None, 1e6, "a server draws a few kW"),
    "pricing.ownership.amortisation_years": (None, 100, "hardware is written off over a few years"),
    "pricing.ownership.pue": (None, 10, "data centres run at a PUE of 1.1-2"),
    "reliability.failure_rate_per_gpu_hour": (None, 1.0, "a GPU failing every hour could not train at all"),
    "reliability.storage_write_GBps_per_node": (1e-3, 1e6, "storage writes a node's checkpoint at MB/s to "
                                                "hundreds of GB/s"),
    "reliability.checkpoint_GB": (None, 1e9, "an exabyte checkpoint is far beyond any model"),
    "reliability.checkpoint_interval_s": (1.0, 1e9, "checkpoints are taken every minutes to days"),
    "reliability.restart_s": (None, 1e9, "a restart takes minutes to hours"),
    "uncertainty.step_time": (None, 100, "a P90/P50 ratio of 100 is already no estimate"),
    "uncertainty.failure_rate": (None, 100, "a P90/P50 ratio of 100 is already no estimate"),
    "uncertainty.gpu_hour_price": (None, 100, "a P90/P50 ratio of 100 is already no estimate"),
    "uncertainty.purchase_price": (None, 100, "a P90/P50 ratio of 100 is already no estimate"),
    "uncertainty.electricity_price": (None, 100, "a P90/P50 ratio of 100 is already no estimate"),
    "uncertainty.seed": (None, 2**63 - 1, "seeds are 64-bit"),
}

_TOKENS = "16x the longest published contexts (1M tokens); every token is scheduled"
SERVING_LIMITS: dict[str, tuple[float | None, float | None, str]] = {
    **{k: v for k, v in SCENARIO_LIMITS.items() if k.startswith(("cluster.", "pricing."))},
    "serving.requests.count": (None, 10**7, "every request is generated and simulated; percentiles settle within "
                               "a few thousand"),
    "serving.requests.concurrency": (None, 2**20, "a million clients is far beyond one deployment's load"),
    "serving.requests.prompt_tokens.mean": (None, 2**24, _TOKENS),
    "serving.requests.prompt_tokens.max": (None, 2**24, _TOKENS),
    "serving.requests.output_tokens.mean": (None, 2**24, _TOKENS),
    "serving.requests.output_tokens.max": (None, 2**24, _TOKENS),
    "serving.max_batch_tokens": (None, 2**24, _TOKENS),
    "serving.max_seqs": (None, 2**20, "servers batch up to a few thousand sequences"),
    "serving.host_overhead_ms": (None, 1e3, "a server's CPU spends microseconds to milliseconds per iteration"),
    "serving.slo.ttft_s": (None, 1e6, "a first token within days is no latency target"),
    "serving.slo.tpot_s": (None, 1e6, "a token per day is no latency target"),
}

NODE_LIMITS: dict[str, tuple[float | None, float | None, str]] = {
    "gpus": (None, 576, "the largest NVLink domain is 576 GPUs, and each GPU of a node is simulated"),
    "nics.count": (None, 576, "a node carries at most one compute NIC per GPU (8 on a DGX H100, 72 on a GB200 "
                              "NVL72 rack, a 576-GPU NVLink domain at most)"),
}

# Monte-Carlo samples (--samples): P10/P90 settle within a few thousand; 100,000 take ~3 s.
MAX_SAMPLES = 100_000
MAX_CLUSTER_GPUS = 32768
MAX_NODES = 4096
# Tasks a step may have (estimated before building it): ~1 min on one core. The largest validated
# plan (Megatron-LM's 1T-parameter GPT on 3,072 A100s, validation/) has ~0.93 M.
MAX_STEP_TASKS = 1_500_000
# A command answers within about ANSWER_SECONDS unless the user allows more (`--max-seconds`):
# the CLI refuses steps estimated beyond that up front (`answer_budget`); run's what-if fixes and
# scaling points are left out once the steps simulated and theirs would exceed it. Building and
# playing out runs at about TASKS_PER_SECOND estimated tasks (scalesim/parallel/size.py) per CPU s
# (measured 2026-12-03: the shipped 1,024-GPU GPT-3 step, ~255,000 estimated tasks, with its 1-GPU
# baseline in 8.6 CPU s under load; 26,000 keeps a margin); the library has only the hard cap.
# Collectives over many GPUs cost more than their task count says: ~2e-4 CPU s per simulated GPU
# (measured 2026-12-03: Llama 3 405B steps of ~30,000 tasks on 512-32,768 H100s, 0.9-6.4 s).
NETWORK_SECONDS_PER_GPU = 2e-4
# Serving (`serve`): sequence steps (a request's prompt chunk or output token in one scheduler
# iteration) simulated per CPU second, measured 2026-12-03 on the shipped serving scenarios:
# 300,000-500,000 with the rate search's probes counted at their bound (17), here 500,000 so
# that long-output and tiny-batch loads (more iterations per step) still answer in time.
SERVING_STEPS_PER_SECOND = 500_000
# `collective`: CPU seconds per GPU x log2(GPUs) to plan and play one size out, measured 2026-12-03
# (all_reduce on 64-1,024 H100s over IB NDR: 0.15-3.1 s per size; 32,768 GPUs: over 200 s).
COLLECTIVE_S_PER_GPU_LOG = 4e-4
MAX_WORKERS_PER_CPU = 4        # worker processes (sweep, validate --workers): a few per CPU at most
ANSWER_SECONDS = 10.0
TASKS_PER_SECOND = 26_000
# A sweep (and `compare --search`'s search) is a batch of runs that shows progress and can resume:
# its plans may take ~2 minutes of simulation together (CPU s, all workers), more with --max-seconds.
SWEEP_SECONDS = 120.0
# Checking one plan's memory in a search (prepare, no simulation): ~1 ms of CPU, measured
# 2026-12-03 (19,062 plans of Llama 3 70B on 64-2,048 H100s in 17 CPU s).
PLAN_CHECK_SECONDS = 1e-3


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: float) -> str:
    """12,345 for integers up to 10^16, 1.23e+20 beyond (and for fractions)."""
    if abs(value) < 1e16 and (isinstance(value, int) or float(value).is_integer()):
        return f"{int(value):,}"
    if isinstance(value, int):
        digits = str(abs(value))            # ints beyond floats: YAML allows at most 2^1024
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    return f"{value:.3g}"


def check_value(key: str, value: Any, bounds: tuple[float | None, float | None, str]) -> None:
    """Raise InputError when a number lies outside (low, high); anything else is left to the schema."""
    low, high, why = bounds
    if not _number(value) or (isinstance(value, float) and not math.isfinite(value)):
        return
    if high is not None and value > high:
        raise InputError(f"{_show(value)} is above the limit of {_show(high)}: {why}", key=key)
    if low is not None and value < low:
        raise InputError(f"{_show(value)} is below the limit of {_show(low)}: {why}", key=key)


def _lookup(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def check_limits(obj: Any, table: dict[str, tuple[float | None, float | None, str]]) -> None:
    """Check every key of `table` that `obj` (a model or a mapping) has."""
    for key, bounds in table.items():
        check_value(key, _lookup(obj, key), bounds)


def check_cluster_size(nodes: int, gpus_per_node: int) -> None:
    if nodes * gpus_per_node > MAX_CLUSTER_GPUS:        # GPUs first: what a sweep's --gpus names
        raise InputError(f"{nodes:,} nodes of {gpus_per_node} GPUs make {nodes * gpus_per_node:,} GPUs, above the "
                         f"limit of {MAX_CLUSTER_GPUS:,}: {SCENARIO_LIMITS['cluster.gpus'][2]}", key="cluster.nodes")
    if nodes > MAX_NODES:
        check_value("cluster.nodes", nodes, SCENARIO_LIMITS["cluster.nodes"])


def estimated_tasks(*, ranks: int, micro_batches: int, tasks_per_micro_batch: float, tasks_per_step: float = 0.0,
                    buckets_per_rank: float = 0.0, **_counts: Any) -> float:
    """Tasks of a step, at most (counts from scalesim.parallel.size.step_counts)."""
    return ranks * (micro_batches * tasks_per_micro_batch + tasks_per_step + buckets_per_rank)


def check_step_size(*, file: str | None = None, **counts: Any) -> None:
    """Refuse a step with more tasks than the budget allows (`answer_budget`, at most
    MAX_STEP_TASKS), naming what drives the count; `counts` are step_counts'."""
    tasks = estimated_tasks(**counts)
    limit, allowed = _task_limit()
    if tasks <= limit:
        return
    ranks, micro_batches, buckets = counts["ranks"], counts["micro_batches"], counts.get("buckets_per_rank", 0.0)
    if buckets > micro_batches * counts["tasks_per_micro_batch"]:
        key = counts.get("bucket_key", "parallel.bucket_mb")
        raise OverBudget(f"its gradient buckets make about {buckets:,.0f} tasks per GPU ({tasks:,.0f} simulated "
                         f"tasks per step; at most {allowed} are allowed): raise {key}, or shard "
                         f"the model over more GPUs (tp, pp, zero: 3)", key=key, file=file, tasks=tasks)
    raise OverBudget(f"the step has about {tasks:,.0f} simulated tasks ({ranks:,} simulated GPUs x "
                     f"{micro_batches:,} micro-batches x ~{counts['tasks_per_micro_batch']:,.0f} tasks each for "
                     f"{counts.get('layers_per_rank', 0):,} layers); at most {allowed} are allowed: fewer "
                     f"micro-batches (raise training.micro_batch or lower training.global_batch), fewer layers, "
                     f"or more pipeline stages", key="training.global_batch", file=file, tasks=tasks)


def _task_limit() -> tuple[int, str]:
    """Tasks a step may have now, and the limit as a message says it."""
    ledger = _LEDGER.get()
    if ledger is None or ledger.limit >= MAX_STEP_TASKS:
        return MAX_STEP_TASKS, f"{MAX_STEP_TASKS:,} (about a minute of simulation)"
    return ledger.limit, (f"{ledger.limit:,} (about {_show(ledger.seconds)} s of simulation, so that the command "
                          f"answers in time; --max-seconds N allows N s, up to {MAX_STEP_TASKS:,} tasks, about "
                          f"a minute)")


class OverBudget(InputError):
    """A plan (or what is left of a command's answer budget) is too small for a step of `tasks`
    estimated tasks; `short()` says so in a few words, for a row of a table."""

    def __init__(self, message: str, *, tasks: float, file: str | None = None, key: str | None = None):
        self.tasks = tasks
        super().__init__(message, file=file, key=key)

    def short(self) -> str:
        """'over the answer budget (N tasks estimated; --max-seconds S to simulate)'."""
        ledger = _LEDGER.get()
        needed = self.tasks + (ledger.spent if ledger is not None else 0.0)
        if self.tasks > MAX_STEP_TASKS:
            return (f"over the answer budget ({self.tasks:,.0f} tasks estimated; no plan may have more than "
                    f"{MAX_STEP_TASKS:,}, about a minute of simulation)")
        if ledger is None:
            return f"over the answer budget ({self.tasks:,.0f} tasks estimated)"
        return (f"over the answer budget ({self.tasks:,.0f} tasks estimated; --max-seconds "
                f"{math.ceil(needed / TASKS_PER_SECOND)} to simulate)")


class _Ledger:
    """A command's answer budget: the tasks it may simulate, and those simulated so far."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.limit = int(min(seconds * TASKS_PER_SECOND, 2 ** 62))     # --max-seconds inf: no limit
        self.spent = 0.0


_LEDGER: contextvars.ContextVar[_Ledger | None] = contextvars.ContextVar("scalesim_answer_budget", default=None)


@contextlib.contextmanager
def _using(ledger: _Ledger | None) -> Iterator[None]:
    token = _LEDGER.set(ledger)
    try:
        yield
    finally:
        _LEDGER.reset(token)


def answer_budget(max_seconds: float | None = None, default_seconds: float = ANSWER_SECONDS):
    """Within the block, refuse (InputError) steps estimated to take longer than `default_seconds`
    (ANSWER_SECONDS; a sweep's: SWEEP_SECONDS) to simulate, or `max_seconds` when that is longer
    (`--max-seconds`); a step at most MAX_STEP_TASKS. Work a command may leave out or refuse
    (`check_affordable`: run's what-if fixes and scaling points, a sweep's plans) is refused once
    the steps simulated in the block (`charge`) and it would exceed that budget."""
    return _using(_Ledger(max(default_seconds, max_seconds or 0.0)))


def fresh_budget(default_seconds: float = ANSWER_SECONDS):
    """Within the block, a new answer budget as large as the current one or `default_seconds` (none
    if none): each design of `compare` is a run of its own, its search a sweep (SWEEP_SECONDS)."""
    ledger = _LEDGER.get()
    return _using(None if ledger is None else _Ledger(max(ledger.seconds, default_seconds)))


def no_budget():
    """Within the block, no answer budget (the library's hard caps only): work the caller has
    budgeted already (a sweep's plans) runs the same in this process as in a worker's."""
    return _using(None)


def charge(tasks: float) -> None:
    """Count a simulated step's estimated tasks against the current answer budget (if any)."""
    ledger = _LEDGER.get()
    if ledger is not None:
        ledger.spent += tasks


def checks_cost(plans: int) -> float:
    """Checking `plans` plans' memory (PLAN_CHECK_SECONDS each), in estimated tasks."""
    return plans * PLAN_CHECK_SECONDS * TASKS_PER_SECOND


def check_affordable(tasks: float, what: str, key: str | None = None, fix: str = "") -> None:
    """Raise OverBudget when simulating `tasks` more would take the command beyond its answer budget
    (`key`: the option or scenario key the message names; `fix`: what else would make it fit)."""
    ledger = _LEDGER.get()
    if ledger is not None and ledger.spent + tasks > ledger.limit:
        raise OverBudget(f"{what}: about {tasks:,.0f} simulated tasks, beyond what is left of the answer budget "
                         f"({max(0.0, ledger.limit - ledger.spent):,.0f} of {ledger.limit:,} estimated tasks, about "
                         f"{_show(ledger.seconds)} s of simulation, so that the command answers in bounded time); "
                         f"{fix}--max-seconds {math.ceil((ledger.spent + tasks) / TASKS_PER_SECOND)} allows it",
                         tasks=tasks, key=key)


def check_serving_size(*, count: int, prompt_tokens: float, output_tokens: float, max_batch_tokens: int,
                       rates: int, search: bool, search_requests: int, search_probes: int,
                       search_full_runs: int = 1, file: str | None = None) -> None:
    """Refuse a serving load (`serve`) whose simulation would outlast the answer budget (or, with
    none, about a minute): each request is scheduled once per prompt chunk and output token, in the
    scenario's run, each of `rates`, with `search` up to `search_probes` short and `search_full_runs` full."""
    runs = count * (1 + rates + (search_full_runs if search and not rates else 0))
    runs += search_probes * min(count, search_requests) if search and not rates else 0
    steps = runs * (output_tokens + prompt_tokens / max_batch_tokens + 1)
    ledger = _LEDGER.get()
    seconds = ledger.seconds if ledger is not None else MAX_STEP_TASKS / TASKS_PER_SECOND
    if steps <= seconds * SERVING_STEPS_PER_SECOND:
        return
    raise InputError(f"{_show(count)} requests of ~{_show(round(output_tokens))} output tokens make about "
                     f"{steps:,.0f} sequence steps to simulate (the scenario's load"
                     f"{f', {rates} rates' if rates else ', the rate search' if search else ''}); at most "
                     f"{seconds * SERVING_STEPS_PER_SECOND:,.0f}, about {_show(round(seconds))} s of simulation, "
                     f"are allowed: fewer requests (percentiles settle within a few thousand), shorter outputs "
                     f"(output_tokens mean or max), fewer --rates, or --max-seconds "
                     f"{math.ceil(steps / SERVING_STEPS_PER_SECOND)}", key="serving.requests.count", file=file)


def _collective_costs(gpus: int) -> tuple[float, float]:
    """CPU seconds per size for n GPUs (~COLLECTIVE_S_PER_GPU_LOG x n log2 n), and the seconds allowed."""
    per_size = COLLECTIVE_S_PER_GPU_LOG * gpus * max(1.0, math.log2(max(gpus, 2)))
    ledger = _LEDGER.get()
    return per_size, ledger.seconds if ledger is not None else MAX_STEP_TASKS / TASKS_PER_SECOND


def collective_sizes_that_fit(gpus: int) -> int:
    """How many sizes a `collective` run on `gpus` GPUs can simulate within the answer budget."""
    per_size, seconds = _collective_costs(gpus)
    return max(0, int(seconds // per_size))


def check_collective_size(gpus: int, sizes: int) -> None:
    """Refuse a `collective` run whose planning and playing out would outlast the answer budget:
    every size plans and plays every flow of every phase, ~COLLECTIVE_S_PER_GPU_LOG x n log2 n
    CPU seconds for n GPUs."""
    per_size, seconds = _collective_costs(gpus)
    if sizes * per_size <= seconds:
        return
    fit = collective_sizes_that_fit(gpus)
    raise InputError(f"{sizes} sizes on {gpus:,} GPUs take about {sizes * per_size:,.0f} s to simulate (every "
                     f"flow of every phase is played out, ~{per_size:.2g} s per size here); at most about "
                     f"{_show(round(seconds))} s: " + (f"give at most {fit} sizes (e.g. --sizes 1M,64M,1G) or fewer "
                                                       "GPUs (--gpus, --nodes)" if fit else
                                                       "give fewer GPUs (--gpus, --nodes)"),
                     key="--sizes" if fit else "--gpus")


def check_workers(workers: int | None, key: str = "--workers") -> None:
    """Refuse more worker processes than MAX_WORKERS_PER_CPU per CPU of this machine."""
    cpus = os.cpu_count() or 1
    if workers is not None and workers > MAX_WORKERS_PER_CPU * cpus:
        raise InputError(f"{_show(workers)} worker processes is above the limit of {MAX_WORKERS_PER_CPU * cpus:,} "
                         f"({MAX_WORKERS_PER_CPU} per CPU, {cpus} here): each is a Python process holding its own "
                         f"copy of the simulator, and more of them than CPUs only wait for one; allowed: 1.."
                         f"{MAX_WORKERS_PER_CPU * cpus:,}", key=key)


# ---------------------------------------------------------------- wall-clock guard

_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "scalesim_deadline", default=None)


class TimeLimitExceeded(InputError):
    """The run took longer than the caller allowed (`time_limit`, `--max-seconds`)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within the block, building and simulating raise TimeLimitExceeded after `seconds` of wall time.

    None: no limit. Scoped to this thread (a context variable), nested limits keep the earliest end.
    """
    if seconds is None:
        yield
        return
    if not (_number(seconds) and seconds > 0):
        raise InputError(f"must be a positive number of seconds, got {seconds!r}", key="--max-seconds")
    end = time.monotonic() + seconds
    current = _DEADLINE.get()
    token = _DEADLINE.set((end, seconds) if current is None or end < current[0] else current)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_time() -> None:
    """Raise TimeLimitExceeded when the current `time_limit` has passed (cheap: call it often)."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise TimeLimitExceeded(f"the run took longer than the {_show(deadline[1])} s allowed; give more time "
                                f"or a smaller scenario", key="--max-seconds")
