"""From a simulated step to the numbers procurement asks for: wiring only.

Resolves the scenario's pricing, ownership and reliability keys (or their
documented defaults) into the pure cost models' inputs, measures each GPU's
busy time on the simulated timeline, and lists every assumption with its
source for reports.
"""

from __future__ import annotations

import math

from scalesim.costs import economics as econ
from scalesim.costs import reliability as rel
from scalesim.costs.economics import Budget, FailureModel, Ownership, Prices, RunInputs
from scalesim.costs.finetune import trained_params
from scalesim.engine import Timeline
from scalesim.hardware.user_catalog import Catalog, builtin_catalog
from scalesim.result import Breakdown, rank_breakdowns
from scalesim.scenario import Scenario
from scalesim.topology import load_node_design


def busy_fractions(timeline: Timeline, parts: dict[int, Breakdown] | None = None) -> dict[int, float]:
    """Per simulated GPU: the fraction of the step its kernels (compute, optimizer) run. `parts`: each
    rank's breakdown of the step, when the caller has them."""
    step = timeline.end_s
    if parts is None:
        parts = rank_breakdowns(timeline)[0] if timeline.intervals else {}
    if step <= 0:
        return {rank: 0.0 for rank in parts}
    return {rank: min((p.compute + p.other) / step, 1.0) for rank, p in parts.items()}


def _design(scenario: Scenario, file: str | None, catalog: Catalog | None = None, caches=None):
    """The scenario's node design (read once per command when given its `caches`, app/caches.py)."""
    if caches is not None:
        return caches.design(scenario.cluster.node, "cluster.node", file, catalog)
    return load_node_design(scenario.cluster.node, key="cluster.node", file=file, catalog=catalog)


def nodes_used(scenario: Scenario, gpus: int, file: str | None = None, catalog: Catalog | None = None,
               caches=None) -> int:
    """Nodes the run occupies: the GPUs it uses over the design's GPUs per node."""
    return max(1, math.ceil(gpus / _design(scenario, file, catalog, caches).gpus))


def nodes_charged(scenario: Scenario, gpus: int, file: str | None = None, catalog: Catalog | None = None,
                  caches=None) -> tuple[float, str]:
    """Nodes whose server, network ports and host power the run is charged for, and on what basis:
    `whole_nodes` when its GPUs fill whole nodes; `per_gpu_share` when it uses part of a node, charged
    its GPUs' share of it (1 GPU of an 8-GPU node: 1/8), as a cloud prices a GPU of a shared node and as
    an owner's other jobs use the rest (the GPUs themselves are always charged one by one).

    >>> from scalesim.scenario import Scenario
    >>> s = Scenario.model_validate({"name": "x", "cluster": {"node": "dgx-h100"}, "model": "gpt2-350m",
    ...                              "training": {"global_batch": 8}})
    >>> nodes_charged(s, 1), nodes_charged(s, 8), nodes_charged(s, 12)
    ((0.125, 'per_gpu_share'), (1, 'whole_nodes'), (1.5, 'per_gpu_share'))
    """
    per_node = _design(scenario, file, catalog, caches).gpus
    if gpus % per_node == 0:
        return gpus // per_node, "whole_nodes"
    return gpus / per_node, "per_gpu_share"


def ownership(scenario: Scenario, gpu_list_price: float | None, nodes: int, file: str | None = None,
              catalog: Catalog | None = None, caches=None) -> tuple[Ownership, dict[str, str]]:
    """The scenario's ownership costs with defaults filled in, and where each number comes from."""
    spec = scenario.pricing.ownership
    design = _design(scenario, file, catalog, caches)
    nvswitch = design.nvlink is not None and design.nvlink.fabric == "nvswitch"
    sources: dict[str, str] = {}

    def pick(name: str, given, default, source: str):
        sources[name] = "scenario" if given is not None else source
        return given if given is not None else default

    gpu_usd = pick("gpu_usd", spec.gpu_usd, gpu_list_price, econ.SOURCES["gpu_usd"])
    server = pick("server_usd", spec.server_usd,
                  econ.SERVER_USD_NVSWITCH if nvswitch else econ.SERVER_USD_PCIE,
                  econ.SOURCES["server_usd_nvswitch" if nvswitch else "server_usd_pcie"])
    network_default = 0.0
    fabric = scenario.cluster.fabric
    if nodes > 1 and fabric is not None:
        link = (catalog or builtin_catalog()).link(fabric.link, key="cluster.fabric.link")
        per_port = (econ.NETWORK_USD_PER_PORT_FAST if link.bw_bytes_per_s >= econ.FAST_PORT_BYTES_PER_S
                    else econ.NETWORK_USD_PER_PORT_SLOW)
        network_default = per_port * fabric.nics_per_node
    network = pick("network_usd_per_node", spec.network_usd_per_node, network_default, econ.SOURCES["network_usd"])
    host = pick("host_power_w", spec.host_power_w,
                econ.HOST_POWER_W_NVSWITCH if nvswitch else econ.HOST_POWER_W_PCIE,
                econ.SOURCES["host_power_w_nvswitch" if nvswitch else "host_power_w_pcie"])
    sources["amortisation_years"] = (econ.SOURCES["amortisation_years"]
                                     if spec.amortisation_years == econ.AMORTISATION_YEARS else "scenario")
    sources["pue"] = econ.SOURCES["pue"] if spec.pue == econ.PUE else "scenario"
    utilisation = pick("utilisation", spec.utilisation, econ.UTILISATION, econ.SOURCES["utilisation"])
    return Ownership(gpu_usd, server, network, host, spec.amortisation_years, spec.pue, utilisation), sources


def failure_model(scenario: Scenario, *, ecc: bool | None, params: float, nodes: int, adapters_only: bool = False
                  ) -> tuple[FailureModel, dict[str, str], float]:
    """Failure rate, checkpoint write and restart time; sources; checkpoint bytes. `params`: the
    parameters a checkpoint saves; `adapters_only`: they are LoRA/QLoRA adapters (the base is frozen)."""
    spec = scenario.reliability
    training = scenario.training
    sources = {}
    if spec.failure_rate_per_gpu_hour is not None:
        rate, sources["failure_rate_per_gpu_hour"] = spec.failure_rate_per_gpu_hour, "scenario"
    else:
        rate, sources["failure_rate_per_gpu_hour"] = rel.default_failure_rate_per_gpu_hour(ecc)
    if spec.checkpoint_GB is not None:
        size, sources["checkpoint_bytes"] = spec.checkpoint_GB * 1e9, "scenario"
    else:
        size = rel.checkpoint_bytes(params, training.precision, training.optimizer)
        sources["checkpoint_bytes"] = ("the adapters' weights + optimizer state: the frozen base is not saved "
                                       "(PEFT's save_pretrained and NeMo's PEFT checkpoints keep the adapters only)"
                                       if adapters_only else
                                       "weights + optimizer state per parameter (scalesim/costs/reliability.py)")
    bandwidth = spec.storage_write_GBps_per_node * 1e9 * nodes
    sources["storage_write_GBps_per_node"] = (rel.SOURCE_STORAGE if spec.storage_write_GBps_per_node * 1e9
                                              == rel.STORAGE_WRITE_BYTES_PER_S_PER_NODE
                                              else "scenario")
    sources["restart_s"] = rel.SOURCE_RESTART if spec.restart_s == rel.RESTART_S else "scenario"
    sources["checkpoint_interval_s"] = ("scenario" if spec.checkpoint_interval_s is not None
                                        else "Young 1974: sqrt(2 x checkpoint write x job MTBF)")
    model = FailureModel(rate, rel.checkpoint_write_s(size, bandwidth), spec.restart_s, spec.checkpoint_interval_s)
    return model, sources, size


def run_inputs(setup, timeline: Timeline, *, samples_per_s: float, tokens_per_s: float | None,
               parts: dict[int, Breakdown] | None = None) -> tuple[RunInputs, list[dict]]:
    """The economics inputs of a simulated setup (runner.Setup), and the assumptions behind them
    (`parts`: each rank's breakdown, when the caller has them)."""
    scenario, file, gpu = setup.scenario, setup.file, setup.gpu
    training = scenario.training
    catalog = getattr(setup, "catalog", None)
    caches = getattr(setup, "caches", None)
    nodes = nodes_used(scenario, setup.gpus, file, catalog, caches)
    fractions = busy_fractions(timeline, parts)
    busy = sum(fractions.values()) / len(fractions) if fractions else 0.0
    own, own_sources = ownership(scenario, gpu.list_price_usd, nodes, file, catalog, caches)
    finetune = getattr(getattr(setup, "plan", None), "finetune", None)
    saved = setup.model.params if finetune is None else trained_params(setup.model.layers, finetune)
    failures, fail_sources, size = failure_model(scenario, ecc=gpu.ecc, params=saved, nodes=nodes,
                                                 adapters_only=finetune is not None)
    prices = Prices(scenario.pricing.gpu_hour_usd, scenario.pricing.electricity_usd_per_kwh)
    charged, basis = nodes_charged(scenario, setup.gpus, file, catalog, caches)
    inputs = RunInputs(gpu=gpu, gpus=setup.gpus, nodes=charged, samples_per_s=samples_per_s,
                       tokens_per_s=tokens_per_s, busy_fraction=busy,
                       budget=Budget(training.tokens, training.epochs, training.dataset_samples),
                       prices=prices, ownership=own, failures=failures)
    gpu_hour = prices.gpu_hour_usd if prices.gpu_hour_usd is not None else gpu.cloud_usd_per_gpu_hour
    rows = [
        ("nodes charged (server, network, host power)", charged,
         "the GPUs' share of a partly used node (per_gpu_share)" if basis == "per_gpu_share"
         else "whole nodes (whole_nodes)"),
        ("GPU-hour price (USD)", gpu_hour,
         "scenario" if prices.gpu_hour_usd is not None else econ.SOURCES["gpu_hour_usd"]),
        ("electricity (USD/kWh)", prices.electricity_usd_per_kwh, econ.SOURCES["electricity_usd_per_kwh"]),
        ("GPU purchase (USD)", own.gpu_usd, own_sources["gpu_usd"]),
        ("server without GPUs (USD/node)", own.server_usd, own_sources["server_usd"]),
        ("network (USD/node)", own.network_usd, own_sources["network_usd_per_node"]),
        ("host draw (W/node)", own.host_power_w, own_sources["host_power_w"]),
        ("amortisation (years)", own.amortisation_years, own_sources["amortisation_years"]),
        ("utilisation of the owned cluster", own.utilisation, own_sources["utilisation"]),
        ("PUE", own.pue, own_sources["pue"]),
        ("GPU power busy / idle (W)", f"{gpu.tdp_w:g} / {gpu.idle_w:g}",
         "catalog tdp and idle (gpus.yaml); busy = kernels running on the simulated timeline"),
        ("failure rate (per GPU-hour)", failures.failure_rate_per_gpu_hour,
         fail_sources["failure_rate_per_gpu_hour"]),
        ("checkpoint size (GB)", size / 1e9, fail_sources["checkpoint_bytes"]),
        ("checkpoint storage (GB/s per node)", scenario.reliability.storage_write_GBps_per_node,
         fail_sources["storage_write_GBps_per_node"]),
        ("restart (s)", failures.restart_s, fail_sources["restart_s"]),
        ("checkpoint interval", "Young/Daly optimum" if failures.interval_s is None else failures.interval_s,
         fail_sources["checkpoint_interval_s"]),
    ]
    rows += model_assumptions(setup)
    return inputs, [{"input": name, "value": value, "source": source} for name, value, source in rows]


def model_assumptions(setup) -> list[tuple[str, object, str]]:
    """Modelling choices a reader of the figures should see, with where each comes from."""
    par, training, gpu = setup.scenario.parallel, setup.scenario.training, setup.gpu
    rows = [("GEMM efficiency (large GEMMs)", gpu.gemm_efficiency_for(training.precision),
             "catalog measurement (gpus.yaml)" if training.precision != "fp8" or gpu.fp8_gemm_efficiency is not None
             else "no FP8 measurement for this GPU: its 16-bit efficiency, an upper bound")]
    if gpu.training_clock_fraction != 1.0:
        rows.append(("sustained clock in training (fraction of the clock its kernel figures were taken at)",
                     gpu.training_clock_fraction,
                     "catalog (gpus.yaml notes: H100/H200 fitted on Lambda's single-GPU runs, validation/fits.yaml; "
                     "MI300X/MI325X measured under load at the power limit, AMD's MAF study)"))
    spread = setup.scenario.cluster.gpu_speed_spread
    if setup.gpus > 1:
        rows.append(("GPU work time vs the median GPU (the slowest of the job's GPUs sets the pace)",
                     setup.plan.slowest_gpu_factor,
                     f"per-GPU speed spread {spread:.1%} "
                     + ("(default: Sinha et al. SC22, 8% variation = 4 IQR/median; costs/variability.py)"
                        if "gpu_speed_spread" not in setup.scenario.cluster.model_fields_set
                        else "(scenario cluster.gpu_speed_spread)")))
    if setup.plan.placement.dp * setup.plan.placement.cp > 1:
        rows.append(("gradient reduction precision", setup.plan.grad_reduce_dtype,
                     "scenario" if par.grad_reduce_dtype != "auto"
                     else "auto: fp32 for plain DDP (PyTorch autocast), else the training precision"))
    return rows
