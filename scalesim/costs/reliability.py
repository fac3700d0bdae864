"""Failures, checkpoints and goodput: how interruptions stretch a training run.

A synchronous data-parallel job stops when any of its GPUs (or the host or
network behind it) fails; it then restarts from the last checkpoint and redoes
the work since. With failures arriving as a Poisson process (exponential
times between failures, the standard assumption of the checkpointing
literature) the job's mean time between failures is

    M = 1 / (failure rate per GPU-hour x GPUs)

and three numbers set what it loses: the time to write a checkpoint (delta),
the time to restart (R) and the interval between checkpoints (tau).

- Young 1974 ("A first order approximation to the optimum checkpoint
  interval", CACM 17(9)): tau_opt = sqrt(2 * delta * M).
- Daly 2006 ("A higher order estimate of the optimum checkpoint interval for
  restart dumps", Future Generation Computer Systems 22(3)): the expected wall time of a job with
  T_s seconds of useful work is

      T_w = M * exp(R / M) * (exp((tau + delta) / M) - 1) * T_s / tau

  exact for exponential failures, including failures during restarts.

Goodput is T_s / T_w. Pure functions, SI units (seconds, bytes, bytes/s).

Default failure rates (per GPU-hour, all causes that interrupt the job:
GPU, HBM, host, network, software, normalised per GPU):

- ECC data-centre GPUs: the Llama 3 405B run, 419 unexpected interruptions
  in a 54-day snapshot on 16,384 H100s (Llama Team, "The Llama 3 Herd of
  Models", arXiv:2407.21783, sec. 3.3.4, Table 5): 419 / (16,384 x 54 x 24 h)
  = 1.97e-5 per GPU-hour (a 1-GPU MTBF of ~5.8 years).
  For comparison, OPT-175B on 992 A100s (Zhang et al. 2022, arXiv:2205.01068,
  and its public logbook) ran about 7.5 hours between interruptions
  (glennklockwood.com/garden/job-reliability): ~1.3e-4 per GPU-hour, 7x
  higher, on a younger cluster with less automation. The uncertainty spread
  in scalesim/app/uncertainty.py covers both.
- Non-ECC cards (GeForce; `ecc: false` or unknown in the catalog): no large
  training run on them has published its failure log. We ASSUME twice the ECC
  rate: memory errors that ECC corrects or reports become silent corruption
  (loss spikes, NaNs) that forces a rollback, and consumer boards are not
  qualified for 24/7 load. An assumption, not a measurement; override it
  with `reliability.failure_rate_per_gpu_hour`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalesim.costs.memory import state_bytes_per_param

SECONDS_PER_HOUR = 3600.0

LLAMA3_INTERRUPTIONS = 419          # unexpected, Llama 3 paper Table 5
LLAMA3_GPUS = 16_384                # H100 80GB
LLAMA3_DAYS = 54
FAILURE_RATE_ECC_PER_GPU_HOUR = LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS * LLAMA3_DAYS * 24.0)
NON_ECC_FACTOR = 2.0                # assumption, see the module docstring

SOURCE_ECC = ("Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100s "
              "(arXiv:2407.21783 sec. 3.3.4, Table 5) = 1.97e-5 per GPU-hour")
SOURCE_NON_ECC = ("assumption: 2x the ECC rate (no published failure log for non-ECC cards "
                  "in multi-week training); ECC rate from Llama 3, arXiv:2407.21783 Table 5")

# Restart after an interruption: detect, drain, reschedule, reload the checkpoint.
# Llama 3 reports 90% effective training time with a mean 2.5-3.1 h between
# interruptions, which G. Lockwood reads as ~16.7 min per restart
# (glennklockwood.com/garden/availability); Lablup's 504-GPU B200 report
# (arXiv:2605.09370) gives a median automatic-retry interval of 11 min.
RESTART_S = 15 * 60.0
SOURCE_RESTART = ("15 min: ~16.7 min per restart implied by Llama 3's 90% effective training time "
                  "(glennklockwood.com/garden/availability); 11 min median auto-retry on 504 B200s "
                  "(Lablup, arXiv:2605.09370)")

# Checkpoint storage: Llama 3's Tectonic file system sustains 2 TB/s for 16,384
# GPUs = 2,048 nodes, i.e. ~1 GB/s per 8-GPU node (arXiv:2407.21783 sec. 3.3.1).
STORAGE_WRITE_BYTES_PER_S_PER_NODE = 1.0e9
SOURCE_STORAGE = ("1 GB/s per node: Llama 3's 2 TB/s sustained storage over 2,048 nodes "
                  "(arXiv:2407.21783 sec. 3.3.1); every node writes its shard in parallel")


def default_failure_rate_per_gpu_hour(ecc: bool | None) -> tuple[float, str]:
    """The default failure rate for a GPU with or without ECC, and where it comes from.

    >>> default_failure_rate_per_gpu_hour(True)[0] < default_failure_rate_per_gpu_hour(False)[0]
    True
    """
    if ecc:
        return FAILURE_RATE_ECC_PER_GPU_HOUR, SOURCE_ECC
    return FAILURE_RATE_ECC_PER_GPU_HOUR * NON_ECC_FACTOR, SOURCE_NON_ECC


def checkpoint_bytes(params: float, precision: str, optimizer: str) -> float:
    """Bytes a full training checkpoint holds: weights and optimizer state (no gradients).

    Mixed-precision Adam: 16-bit weights (2 B) + fp32 master, m and v (12 B)
    = 14 B per parameter, the state ZeRO (Rajbhandari et al. 2020, sec. 3.1)
    counts minus the gradients, which a checkpoint does not keep.

    >>> checkpoint_bytes(1e9, "bf16", "adamw")
    14000000000.0
    """
    weights, _gradients, optimizer_state = state_bytes_per_param(precision, optimizer)
    return params * (weights + optimizer_state)


def checkpoint_write_s(size_bytes: float, write_bw_bytes_per_s: float) -> float:
    """Seconds the job stalls to write one checkpoint (synchronous save)."""
    return size_bytes / write_bw_bytes_per_s


def job_mtbf_s(failure_rate_per_gpu_hour: float, gpus: int) -> float:
    """Mean time between interruptions of a job on `gpus` GPUs; inf without failures.

    >>> job_mtbf_s(1e-4, 10) / 3600
    1000.0
    """
    rate = failure_rate_per_gpu_hour * gpus
    return math.inf if rate <= 0 else SECONDS_PER_HOUR / rate


def young_daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum time between checkpoints, sqrt(2 * delta * M).

    >>> young_daly_interval_s(50.0, 3600.0)
    600.0
    """
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def goodput(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Useful fraction of wall time, T_s / T_w, from Daly's expected wall time.

    Without failures (M = inf) only the checkpoint writes are lost; free
    checkpoints taken continuously (interval and write both 0) lose only the
    restarts: exp(-R / M).

    >>> goodput(3600.0, 0.0, 0.0, math.inf)
    1.0
    """
    if interval_s < 0 or checkpoint_s < 0:
        raise ValueError("the checkpoint interval and write time cannot be negative")
    if math.isinf(mtbf_s):
        return 1.0 if math.isinf(interval_s) else interval_s / (interval_s + checkpoint_s)
    if interval_s == 0:
        return math.exp(-restart_s / mtbf_s) if checkpoint_s == 0 else 0.0
    if math.isinf(interval_s):
        return 0.0
    try:
        stretch = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + checkpoint_s) / mtbf_s)
    except OverflowError:
        return 0.0
    return interval_s / stretch


@dataclass(frozen=True, slots=True)
class Reliability:
    """What failures do to one training run."""

    failure_rate_per_gpu_hour: float
    mtbf_s: float                   # the job's mean time between interruptions
    checkpoint_s: float             # delta: one checkpoint write
    restart_s: float                # R
    interval_s: float               # tau: useful work between checkpoints
    goodput: float                  # useful / wall time
    useful_s: float | None          # T_s (None without a budget)
    wall_s: float | None            # T_w
    interruptions: float | None     # expected failures during the run
    checkpoints: float | None       # checkpoints written (None: free, continuous checkpoints)
    lost_s: dict[str, float] | None  # wall time that is not useful work, by cause

    def as_json(self) -> dict:
        return {
            "failure_rate_per_gpu_hour": self.failure_rate_per_gpu_hour,
            "mtbf_s": None if math.isinf(self.mtbf_s) else self.mtbf_s,
            "checkpoint_write_s": self.checkpoint_s,
            "restart_s": self.restart_s,
            "checkpoint_interval_s": None if math.isinf(self.interval_s) else self.interval_s,
            "goodput": self.goodput,
            "ideal_time_s": self.useful_s,
            "expected_interruptions": self.interruptions,
            "checkpoints": self.checkpoints,
            "lost_s": self.lost_s,
        }


def run_reliability(*, useful_s: float | None, gpus: int, failure_rate_per_gpu_hour: float,
                    checkpoint_s: float, restart_s: float, interval_s: float | None = None) -> Reliability:
    """Goodput, wall time and expected interruptions of a run of `useful_s` seconds of work.

    `interval_s` None takes Young's optimum, capped at the run itself (a run
    shorter than the interval writes one checkpoint, at its end).
    """
    mtbf = job_mtbf_s(failure_rate_per_gpu_hour, gpus)
    if interval_s is not None:
        tau = interval_s
    elif math.isinf(mtbf):
        tau = math.inf                      # nothing to protect against: one checkpoint at the end
    else:
        tau = young_daly_interval_s(checkpoint_s, mtbf)
    if useful_s is not None and useful_s > 0:
        tau = min(tau, useful_s)
    fraction = goodput(tau, checkpoint_s, restart_s, mtbf)
    if useful_s is None:
        return Reliability(failure_rate_per_gpu_hour, mtbf, checkpoint_s, restart_s, tau, fraction,
                           None, None, None, None, None)
    wall = math.inf if fraction <= 0 else useful_s / fraction
    if math.isinf(wall):                    # failures outpace checkpoints: the run never finishes
        return Reliability(failure_rate_per_gpu_hour, mtbf, checkpoint_s, restart_s, tau, 0.0,
                           useful_s, None, None, None, None)
    interruptions = 0.0 if math.isinf(mtbf) else wall / mtbf
    checkpoints = useful_s / tau if tau > 0 else None
    writing = (checkpoints or 0.0) * checkpoint_s
    restarting = min(interruptions * restart_s, max(wall - useful_s - writing, 0.0))
    redoing = max(wall - useful_s - writing - restarting, 0.0)
    return Reliability(failure_rate_per_gpu_hour, mtbf, checkpoint_s, restart_s, tau, fraction,
                       useful_s, wall, interruptions, checkpoints,
                       {"checkpoint_writes": writing, "restarts": restarting, "recomputed_work": redoing})
