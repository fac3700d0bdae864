"""Time, money and energy of a whole training run, from the simulated step.

Pure functions of the step's throughput and GPU utilisation, the scenario's
budget, prices and ownership costs, and the failure model of
`scalesim.costs.reliability`. SI units inside (seconds, watts, joules); money
in US dollars; energy reported in kWh.

- Time to train: the budget (tokens, or epochs x dataset samples) at the
  simulated throughput is the useful time; failures, restarts and checkpoint
  writes stretch it to the wall time (Daly 2006).
- Cloud: GPU-hours of wall time x the GPU-hour price.
- On premises (total cost of ownership): the purchase (GPUs, servers,
  network) spread evenly over the amortisation period and charged for the
  wall time of the run, plus electricity: GPU and host draw x PUE x price.
- Energy: each GPU draws its TDP while a kernel runs (compute, optimizer)
  and its idle power otherwise (waiting, exposed communication, pipeline
  bubbles, checkpoint writes, restarts), from the simulated busy time; the
  hosts draw `host_power_w` per node throughout.

Ownership defaults (all USD, per node unless said; overridable under
`pricing.ownership`):

- GPU: the catalog's `list_price_usd` (indicative, sources in gpus.yaml).
- Server without GPUs, NVSwitch (HGX/DGX-class) designs: $69,000 = the DGX
  A100 launch price of $199,000 (shared/reference/hardware.yaml, dgx_a100)
  minus 8 x the A100 80GB list price of $16,250 (Lambda); it covers the
  NVSwitch baseboard, two CPUs, memory, NICs and chassis.
- Server without GPUs, PCIe designs: $15,000, an ASSUMPTION for a dual-socket
  4U chassis with 8 double-width slots, CPUs, 512 GB RAM and power supplies
  (no sourced price found).
- Network between nodes, per NIC port (NIC, a share of two switch tiers and
  the cable or optics): $4,000 at >= 200 Gb/s, $1,000 below. ASSUMPTION; one
  node has no fabric to buy.
- Host draw: 2,000 W for NVSwitch designs (half the non-GPU maximum of DGX
  H100, 10.2 kW max - 8 x 700 W, and DGX A100, 6.5 kW - 8 x 400 W, NVIDIA
  user guides: CPUs, fans, switches and NICs run well below their maximum
  during training), 800 W for PCIe servers (ASSUMPTION: two CPUs, memory,
  fans, NIC).
- Amortisation: 4 years, an ASSUMPTION between the ~2-year GPU generation
  cadence and the 5-6 years over which hyperscalers depreciate servers
  (Microsoft and Alphabet moved to 6 years in 2022-2023 filings).
- PUE: 1.58, the Uptime Institute 2023 global average (Global Data Center
  Survey 2023); new AI halls reach 1.1-1.3, a desk-side box ~1.0.
- Utilisation: 0.80 of its life the owned cluster runs jobs; the idle rest
  (between projects, draining for large jobs, maintenance, burn-in) is
  charged to the runs. Meta's two A100 research clusters (16k and 8k GPUs,
  11 months, 4 million jobs) ran at about 80% or more (Kokolis et al., HPCA
  2025, arXiv:2410.21680, as summarised in reviews of the paper: not re-read
  in its text here, so an estimate). Not the Llama 3 paper's ">90% effective
  training time" of one pre-training job (arXiv:2407.21783 section 3.3.4
  text): that is a job's goodput under failures and restarts, which the
  reliability model (`scalesim.costs.reliability`) already charges, so using
  it here would count those losses twice. 1.0 is a cluster that is never idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scalesim.costs.reliability import Reliability, run_reliability
from scalesim.hardware import GpuSpec

SECONDS_PER_HOUR = 3600.0
HOURS_PER_YEAR = 8760.0
JOULES_PER_KWH = 3.6e6

SERVER_USD_NVSWITCH = 199_000.0 - 8 * 16_250.0
SERVER_USD_PCIE = 15_000.0
NETWORK_USD_PER_PORT_FAST = 4_000.0     # >= 200 Gb/s ports
NETWORK_USD_PER_PORT_SLOW = 1_000.0
FAST_PORT_BYTES_PER_S = 200e9 / 8
HOST_POWER_W_NVSWITCH = 2_000.0
HOST_POWER_W_PCIE = 800.0
AMORTISATION_YEARS = 4.0
PUE = 1.58
UTILISATION = 0.80          # estimated: share of an owned cluster's life spent running jobs (docstring)

SOURCES = {
    "gpu_usd": "catalog list_price_usd (indicative; sources in scalesim/hardware/data/gpus.yaml)",
    "server_usd_nvswitch": "DGX A100 launch price $199,000 minus 8 x A100 80GB list $16,250 "
                           "(shared/reference/hardware.yaml)",
    "server_usd_pcie": "assumption: dual-socket 8-GPU PCIe server without GPUs",
    "network_usd": "assumption: $4,000 per >=200 Gb/s NIC port (NIC, two switch tiers, optics), "
                   "$1,000 below; none for one node",
    "host_power_w_nvswitch": "half the non-GPU maximum of DGX H100 (10.2 kW) and DGX A100 (6.5 kW), "
                             "NVIDIA user guides",
    "host_power_w_pcie": "assumption: two CPUs, memory, fans, NIC of a PCIe GPU server",
    "amortisation_years": "assumption between the ~2-year GPU cadence and 5-6-year hyperscaler "
                          "server depreciation",
    "pue": "Uptime Institute Global Data Center Survey 2023: industry average PUE 1.58",
    "utilisation": "estimate: Meta's A100 research clusters RSC-1/RSC-2 ran at ~80%+ over 11 months "
                   "(Kokolis et al., HPCA 2025, arXiv:2410.21680); idle time is charged to the runs",
    "electricity_usd_per_kwh": "scenario pricing.electricity_usd_per_kwh [0.15]",
    "gpu_hour_usd": "catalog cloud_usd_per_gpu_hour: midpoint of the aggregator ranges in "
                    "shared/reference/hardware.yaml",
}


@dataclass(frozen=True, slots=True)
class Budget:
    """What the run must process: tokens, or epochs over a dataset of samples."""

    tokens: float | None = None
    epochs: float | None = None
    dataset_samples: int | None = None


@dataclass(frozen=True, slots=True)
class Prices:
    gpu_hour_usd: float | None = None          # None: the catalog's typical cloud price
    electricity_usd_per_kwh: float = 0.15


@dataclass(frozen=True, slots=True)
class Ownership:
    """What owning the cluster costs, resolved to numbers (see the module docstring)."""

    gpu_usd: float | None                     # per GPU; None when the catalog has no price
    server_usd: float                         # per node, without its GPUs
    network_usd: float                        # per node: NIC ports, switch share, cables
    host_power_w: float                       # per node, everything but the GPUs
    amortisation_years: float = AMORTISATION_YEARS
    pue: float = PUE
    utilisation: float = UTILISATION          # share of the amortisation period spent on runs like this


@dataclass(frozen=True, slots=True)
class FailureModel:
    failure_rate_per_gpu_hour: float
    checkpoint_s: float                       # one checkpoint write
    restart_s: float
    interval_s: float | None = None           # None: Young's optimum


@dataclass(frozen=True, slots=True)
class RunInputs:
    """Everything the economics of one run depends on, as numbers."""

    gpu: GpuSpec
    gpus: int
    nodes: float           # servers charged: whole nodes, or the GPUs' share of a partly used node (app/procurement.py)
    samples_per_s: float
    tokens_per_s: float | None
    busy_fraction: float                      # mean over GPUs of kernel-busy time / step time
    budget: Budget
    prices: Prices
    ownership: Ownership
    failures: FailureModel


@dataclass(frozen=True, slots=True)
class Economics:
    time_to_train_s: float | None             # wall time, failures included
    cost_usd: float | None                    # cloud cost of the wall time
    energy_kwh: float | None                  # GPUs + hosts (IT load, before PUE)
    reliability: Reliability | None = None
    details: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return dict(self.details)


def time_to_train_s(budget: Budget, samples_per_s: float, tokens_per_s: float | None) -> float | None:
    """Seconds to process the budget at the simulated throughput (None without a budget)."""
    if budget.tokens is not None and tokens_per_s:
        return budget.tokens / tokens_per_s
    if budget.epochs is not None and budget.dataset_samples is not None:
        return budget.epochs * budget.dataset_samples / samples_per_s
    return None


def budget_tokens(budget: Budget, tokens_per_sample: float | None) -> float | None:
    """Tokens the run processes (for cost per million tokens)."""
    if budget.tokens is not None:
        return budget.tokens
    if budget.epochs is not None and budget.dataset_samples is not None and tokens_per_sample:
        return budget.epochs * budget.dataset_samples * tokens_per_sample
    return None


def gpu_power_w(gpu: GpuSpec, busy_fraction: float) -> float:
    """Average draw of one GPU: TDP while kernels run, idle power the rest of the time."""
    return gpu.idle_w + (gpu.tdp_w - gpu.idle_w) * min(max(busy_fraction, 0.0), 1.0)


def cloud_cost_usd(gpus: int, wall_s: float, gpu_hour_usd: float) -> float:
    """GPU-hours x price.

    >>> cloud_cost_usd(8, 7200.0, 2.0)
    32.0
    """
    return gpus * wall_s / SECONDS_PER_HOUR * gpu_hour_usd


def capex_usd(ownership: Ownership, gpus: int, nodes: int) -> dict[str, float] | None:
    """Purchase price of the cluster by part; None when the GPU has no price."""
    if ownership.gpu_usd is None:
        return None
    return {"gpus": ownership.gpu_usd * gpus, "servers": ownership.server_usd * nodes,
            "network": ownership.network_usd * nodes}


def amortised_usd(capex: float, years: float, wall_s: float, utilisation: float = 1.0) -> float:
    """The share of the purchase a run of `wall_s` uses up, straight-line over `years`.

    Only `utilisation` of the period does useful runs; the idle rest is
    charged to them too.

    >>> amortised_usd(8760.0, 1.0, 3600.0)
    1.0
    >>> amortised_usd(8760.0, 1.0, 3600.0, utilisation=0.5)
    2.0
    """
    return capex / (years * HOURS_PER_YEAR * utilisation) * wall_s / SECONDS_PER_HOUR


def energy_kwh(*, gpu: GpuSpec, gpus: int, nodes: int, host_power_w: float, busy_fraction: float,
               computing_s: float, stalled_s: float) -> dict[str, float]:
    """GPU and host energy of a run: GPUs at their simulated mix of busy and idle while
    computing (useful and redone work), idle while stalled (checkpoints, restarts)."""
    gpu_j = gpus * (gpu_power_w(gpu, busy_fraction) * computing_s + gpu.idle_w * stalled_s)
    host_j = nodes * host_power_w * (computing_s + stalled_s)
    return {"gpu": gpu_j / JOULES_PER_KWH, "host": host_j / JOULES_PER_KWH}


def _per_million(cost: float | None, tokens: float | None) -> float | None:
    return None if cost is None or not tokens else cost / (tokens / 1e6)


def training_economics(run: RunInputs) -> Economics:
    """Time to train (failures included), cloud and on-premises cost, energy for the budget."""
    useful = time_to_train_s(run.budget, run.samples_per_s, run.tokens_per_s)
    fm = run.failures
    rel = run_reliability(useful_s=useful, gpus=run.gpus, failure_rate_per_gpu_hour=fm.failure_rate_per_gpu_hour,
                          checkpoint_s=fm.checkpoint_s, restart_s=fm.restart_s, interval_s=fm.interval_s)
    gpu_hour = run.prices.gpu_hour_usd if run.prices.gpu_hour_usd is not None else run.gpu.cloud_usd_per_gpu_hour
    if useful is None:
        return Economics(None, None, None, rel, {"gpu_hour_usd": gpu_hour, "reliability": rel.as_json()})
    wall = rel.wall_s
    tokens = budget_tokens(run.budget, run.tokens_per_s / run.samples_per_s if run.tokens_per_s else None)
    finite = wall is not None and math.isfinite(wall)
    lost = rel.lost_s or {}
    stalled = lost.get("checkpoint_writes", 0.0) + lost.get("restarts", 0.0)
    energy = (energy_kwh(gpu=run.gpu, gpus=run.gpus, nodes=run.nodes, host_power_w=run.ownership.host_power_w,
                         busy_fraction=run.busy_fraction, computing_s=wall - stalled, stalled_s=stalled)
              if finite else {"gpu": math.inf, "host": math.inf})
    it_kwh = energy["gpu"] + energy["host"]
    facility_kwh = it_kwh * run.ownership.pue
    cloud = cloud_cost_usd(run.gpus, wall, gpu_hour) if gpu_hour is not None and finite else None

    own = run.ownership
    capex = capex_usd(own, run.gpus, run.nodes)
    power_usd = facility_kwh * run.prices.electricity_usd_per_kwh if finite else None
    if capex is not None and finite:
        amortised = amortised_usd(sum(capex.values()), own.amortisation_years, wall, own.utilisation)
        on_prem = {"capex_usd": capex, "capex_total_usd": sum(capex.values()),
                   "amortised_usd": amortised, "power_usd": power_usd, "cost_usd": amortised + power_usd,
                   "usd_per_million_tokens": _per_million(amortised + power_usd, tokens)}
    else:
        on_prem = {"capex_usd": capex, "capex_total_usd": None if capex is None else sum(capex.values()),
                   "amortised_usd": None, "power_usd": power_usd, "cost_usd": None,
                   "usd_per_million_tokens": None}
    on_prem.update({"amortisation_years": own.amortisation_years, "utilisation": own.utilisation, "pue": own.pue,
                    "host_power_w_per_node": own.host_power_w,
                    "electricity_usd_per_kwh": run.prices.electricity_usd_per_kwh})
    details = {
        "ideal_time_s": useful,
        "time_to_train_s": wall if finite else None,
        "tokens": tokens,
        "gpu_busy_fraction": run.busy_fraction,
        "cloud": {"gpu_hour_usd": gpu_hour, "gpu_hours": run.gpus * wall / SECONDS_PER_HOUR if finite else None,
                  "cost_usd": cloud, "usd_per_million_tokens": _per_million(cloud, tokens)},
        "on_prem": on_prem,
        "energy_kwh": {"gpu": energy["gpu"], "host": energy["host"], "it": it_kwh, "facility": facility_kwh}
        if finite else None,
    }
    return Economics(wall if finite else None, cloud, it_kwh if finite else None, rel, details)
