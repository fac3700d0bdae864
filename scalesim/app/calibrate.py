"""`scalesim calibrate`: fit link and GPU efficiencies to a user's own measurements.

The catalog's efficiencies are fractions of a datasheet rate that real transfers
and kernels reach (scalesim/hardware/data/*.yaml). Calibration sets them from
the user's figures with the model that uses them, so a calibrated catalog
reproduces those figures:

- a link's `efficiency` from nccl-tests bus bandwidth: the collective is
  simulated exactly as `scalesim collective` does (collective_bench), and the
  efficiency is the one at which the simulated busbw matches the measured one
  on the bandwidth-bound sizes (>= FIT_MIN_BYTES and on the log's plateau: busbw
  within PLATEAU of the log's highest; the geometric mean of predicted / measured
  is 1). Busbw never falls as a link gets more efficient, so bisection finds it.
  Smaller sizes, and sizes still climbing towards the plateau, are latency- or
  pipeline-bound and left out of the fit (the before/after table still shows them).
  The link is the one that bounds those sizes (link_to_fit): a --link that does not
  (nvlink4 under an NVLS all-reduce, which the switch's reduction holds back) gives way
  to it, with a line saying so; fitted, it would only sink to where it starts to bound.
- an NVSwitch's `nvls_pipeline_fill` (the NVLS kernel's pipeline fill, in loops;
  scalesim/collectives/nvls.py) from the climbing sizes (>= RAMP_MIN_BYTES, below the
  plateau), when the link is an NVSwitch that reduces in the network: bisection again
  (busbw never rises as the fill deepens), the geometric mean of predicted / measured
  on those sizes is 1. The fill also slows the plateau a little, so efficiency and
  fill are fitted in turn (JOINT_ROUNDS) until both hold. The catalog's own value was
  fitted by this same function on one source (scalesim/hardware/data/links.yaml).
- a GPU's `gemm_efficiency` (`fp8_gemm_efficiency` for fp8 rows) from GEMM
  TFLOP/s: measured / (dense peak x the GPU's training_clock_fraction x the shape
  and depth factors costs/compute.py applies to that GEMM), the median over rows, so that the
  predicted GEMM rate is the measured one; `memory_bw_efficiency` from streaming
  GB/s: measured / datasheet bandwidth, the median (scalesim/app/calibrate_gpu.py).

The result is written as a catalog folder (`{base: NAME, <fitted field>}` entries)
to pass with `--catalog`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from scalesim.app.calibrate_gpu import Check, Fit, fit_gemm, fit_memory  # noqa: F401  (re-exported)
from scalesim.app.collective_bench import time_collective
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog, builtin_catalog, dump_entries
from scalesim.app.measurements import BusbwPoint, NcclTestsLog, read_measurements
from scalesim.schema import read_yaml
from scalesim.topology import Fabric, NodeDesign, Topology, build_cluster, builtin_topology_names, load_node_design

FIT_MIN_BYTES = 64 * 2**20
# A size is on the plateau when its busbw is within this share of the log's highest. A real NVLS
# all-reduce on 8x H100 (tests/data/nccl-tests-h100-issue290.txt) still climbs 383 -> 474 GB/s from
# 128 MiB to 4 GiB; the fixed-size rule alone fitted those climbing sizes with the flat ones.
PLATEAU = 0.05
EFFICIENCY_RANGE = (0.02, 1.0)
RAMP_MIN_BYTES = 2**20           # below 1 MiB a call is latency-bound: the fill is not what sets it
FILL_RANGE = (0.0, 64.0)         # loops of the NVLS pipeline
JOINT_ROUNDS = 4
# Which link bounds a log's runs: each catalog link of its topology lowered by BOUND_STEP (1%), the busbw
# simulated on the fitted sizes. A link bounds them when the busbw follows it at least BOUND_SHARE as
# closely as the link it follows most, and that one by at least BOUND_MIN (else latency bounds them).
BOUND_STEP = 0.99
BOUND_SHARE = 0.5
BOUND_MIN = 0.2
BISECTIONS = 24
NETWORK_KINDS = ("infiniband", "roce", "ethernet")
# How nvidia-smi / rocm-smi names a GPU (as nccl-tests prints it) -> catalog GPU; most specific first.
DEVICE_NAMES = (("GB300", "gb300"), ("GB200", "gb200"), ("GB10", "gb10"), ("GH200", "gh200"), ("B300", "b300"), ("B200", "b200"),
                ("H200 NVL", "h200-nvl"), ("H200", "h200-sxm"), ("H100 NVL", "h100-nvl"), ("H100 PCIe", "h100-pcie"),
                ("H100", "h100-sxm"), ("A100-SXM4-40GB", "a100-40gb-sxm"), ("A100-SXM4-80GB", "a100-80gb-sxm"),
                ("A100 80GB PCIe", "a100-80gb-pcie"), ("A100-PCIE-40GB", "a100-40gb-pcie"), ("L40S", "l40s"),
                ("L40", "l40"), ("L4", "l4"), ("RTX 6000 Ada", "rtx6000-ada"), ("RTX PRO 6000", "rtx-pro-6000"),
                ("RTX 5090", "rtx5090"), ("RTX 4090", "rtx4090"), ("RTX 3090", "rtx3090"), ("MI355X", "mi355x"),
                ("MI325X", "mi325x"), ("MI300X", "mi300x"))


# ---------------------------------------------------------------- topology of a log

def gpu_of_device(device: str, file: str) -> str:
    for text, name in DEVICE_NAMES:
        if text.lower() in device.lower():
            return name
    raise InputError(f"no catalog GPU matches the device '{device}'; give --topology (a design or .yaml)", file=file)


def design_for_log(log: NcclTestsLog, topology: str | None, catalog: Catalog) -> NodeDesign:
    """The node design the run took place on: --topology, else the built-in design of its GPU."""
    if topology:
        return load_node_design(topology, key="--topology", catalog=catalog)
    gpu = gpu_of_device(log.device, log.file)
    per_node = log.gpus // log.nodes
    designs = [d for d in map(load_node_design, builtin_topology_names()) if d.gpu == gpu and d.gpus >= per_node]
    if not designs:
        raise InputError(f"no built-in node design holds {per_node} x {gpu}; give --topology", file=log.file)
    return min(designs, key=lambda d: (d.gpus != per_node, d.name))


def log_topology(log: NcclTestsLog, design: NodeDesign, network: str | None, catalog: Catalog) -> Topology:
    if log.nodes == 1:
        return build_cluster(design, catalog=catalog)
    link = network or (design.nics.link if isinstance(design.nics.link, str) else None)
    if link is None:
        raise InputError(f"{log.nodes} hosts ran this test, but {design.name} names no NIC link; give --link "
                         "(the network link, e.g. ib-ndr)", file=log.file, key="--link")
    fabric = Fabric(link, design.nics.count or 8, "rail-optimized")
    return build_cluster(design, nodes=log.nodes, fabric=fabric, catalog=catalog)


def default_link(log: NcclTestsLog, design: NodeDesign, catalog: Catalog) -> str:
    """The link that bounds the run: the network across hosts, else the NVLink/xGMI port, else PCIe."""
    gpu = catalog.resolve_gpu(design.gpu, key="gpu")
    if log.nodes > 1 and isinstance(design.nics.link, str):
        return design.nics.link
    if design.nvlink is not None:
        return design.nvlink.link if isinstance(design.nvlink.link, str) else gpu.nvlink
    return design.pcie.link if isinstance(design.pcie.link, str) else gpu.pcie


# ---------------------------------------------------------------- links

def busbw_of(logs: list[NcclTestsLog], topologies: Callable[[Catalog], list[Topology]], algo: str = "auto"):
    """busbw(catalog, rows): the busbw `scalesim collective` simulates for `rows` with that catalog."""
    def busbw(catalog: Catalog, which) -> list[float]:
        tops = dict(zip((log.file for log in logs), topologies(catalog)))
        return [time_collective(tops[log.file], log.op, log.gpus, p.size_bytes, algo).busbw_GBps for log, p in which]
    return busbw


def with_field(catalog: Catalog, link: str, **fields) -> Catalog:
    return catalog.with_spec(replace(catalog.link(link), **fields), "calibrate")


def solve_field(busbw, catalog: Catalog, link: str, field: str, rows, bounds: tuple[float, float],
                rising: bool) -> float | None:
    """The value of `link`'s `field` at which the simulated busbw of `rows` matches them (geometric
    mean of predicted / measured 1), by bisection; None when the busbw does not depend on it."""
    def log_error(value: float) -> float:
        got = busbw(with_field(catalog, link, **{field: value}), rows)
        return statistics.fmean(math.log(b / p.busbw_GBps) for b, (_, p) in zip(got, rows))

    low, high = bounds
    at_low, at_high = log_error(low), log_error(high)
    if abs(at_high - at_low) < 1e-3:
        return None
    if rising:
        return high if at_high <= 0 else low if at_low >= 0 else _bisect(log_error, low, high)
    return low if at_low <= 0 else high if at_high >= 0 else _bisect(lambda v: -log_error(v), low, high)


def nvls_switch_link(topologies: list[Topology]) -> str | None:
    """The catalog name of the NVSwitch (with in-network reduction) the logs' GPUs hang off, if any."""
    for top in topologies:
        for _, data in top.graph.nodes(data=True):
            if data.get("kind") == "nvswitch" and getattr(data.get("link"), "in_network_reduction", False):
                return data["link"].name
    return None


def link_responses(busbw, catalog: Catalog, topologies: list[Topology], rows) -> dict[str, float]:
    """How closely the simulated busbw of `rows` follows each catalog link of `topologies`: d ln busbw /
    d ln efficiency from the link's efficiency lowered by BOUND_STEP (1: the link alone bounds the rows,
    0: it has room to spare). It asks the collective's own pricing which resource holds its flows back: a
    port's capacity (ring, tree), an NVSwitch's in-network reduction (NVLS: each flow's cap), a NIC."""
    links = catalog.links()
    names = sorted({d["link"].name for top in topologies for *_, d in top.graph.edges(data=True)}
                   | {d["link"].name for top in topologies for _, d in top.graph.nodes(data=True) if d.get("link")})
    base = busbw(catalog, rows)
    out = {}
    for name in (n for n in names if n in links):
        lowered = busbw(with_field(catalog, name, efficiency=links[name].efficiency * BOUND_STEP), rows)
        out[name] = statistics.fmean(math.log(b / low) for b, low in zip(base, lowered)) / -math.log(BOUND_STEP)
    return out


def link_to_fit(named: str | None, fallback: str, logs: list[NcclTestsLog], topologies, catalog: Catalog
                ) -> tuple[str, str]:
    """(the link to fit, a line saying why it is not the --link named): the link that bounds the logs'
    bandwidth-bound sizes. A named link on the collective's path that does not bound them (nvlink4 under
    an NVLS all-reduce, which the NVSwitch's reduction holds back) gives way to the one that does: fitted
    instead, its efficiency would only sink to where it starts to bound, slowing every other transfer
    over it. One off the path is refused."""
    rows, busbw = bandwidth_bound(logs), busbw_of(logs, topologies)
    responses = link_responses(busbw, catalog, topologies(catalog), rows)
    top = max(responses, key=responses.__getitem__, default=None)
    if top is None or responses[top] < BOUND_MIN:
        return named or fallback, ""
    choice = named or fallback
    if responses.get(choice, 0.0) >= BOUND_SHARE * responses[top]:
        return choice, ""
    if named is None:
        return top, ""
    log, point = rows[-1]
    algo = time_collective(topologies(catalog)[logs.index(log)], log.op, log.gpus, point.size_bytes).algo
    if solve_field(busbw, catalog, named, "efficiency", rows, EFFICIENCY_RANGE, True) is None:
        raise InputError(f"the simulated bus bandwidth does not depend on '{named}' here (it is not on the "
                         f"path of this {algo} {log.op}); {top} bounds these runs: give --link {top}", key="--link")
    return top, (f"{named} does not bound these runs ({algo} {log.op}): {top} does, so {top} is fitted "
                 f"instead and {named} keeps its catalog efficiency {catalog.link(named).efficiency:g}")


def _with_fill(busbw, catalog: Catalog, link: str, efficiency: float, logs, topologies, fit_rows, ramp):
    """(catalog, efficiency, switch, rows): the NVLS switch's pipeline fill fitted on the climbing sizes
    that run NVLS (`rows`), in turn with `link`'s efficiency on the plateau (JOINT_ROUNDS). switch is None
    when nothing was fitted: no NVLS switch, no climbing size on NVLS, or a link whose efficiency cannot
    hold the plateau once the fill slows it (the NVLink port under an NVLS run: calibrate the switch)."""
    alone = with_field(catalog, link, efficiency=efficiency)
    switch = nvls_switch_link(topologies(catalog)) if ramp else None
    if switch is not None:          # the sizes NVLS runs at when it is at its fastest (no fill)
        tops = dict(zip((log.file for log in logs), topologies(with_field(alone, switch, nvls_pipeline_fill=0.0))))
        ramp = [(log, p) for log, p in ramp
                if time_collective(tops[log.file], log.op, log.gpus, p.size_bytes).algo == "nvls"]
    fitted, joint = alone, efficiency
    for _ in range(JOINT_ROUNDS if switch and ramp else 0):
        fill = solve_field(busbw, fitted, switch, "nvls_pipeline_fill", ramp, FILL_RANGE, False)
        if fill is None:
            break
        fitted = with_field(fitted, switch, nvls_pipeline_fill=round(fill, 3))
        joint = solve_field(busbw, fitted, link, "efficiency", fit_rows, EFFICIENCY_RANGE, True) or joint
        fitted = with_field(fitted, link, efficiency=joint)
    if fitted is alone or (joint in EFFICIENCY_RANGE and switch != link):
        return alone, efficiency, None, []
    return fitted, joint, switch, ramp


def fit_link(logs: list[NcclTestsLog], link: str, topologies: Callable[[Catalog], list[Topology]],
             catalog: Catalog, notice: str = "") -> list[Fit]:
    """The efficiency of `link` at which the simulated busbw matches the logs' bandwidth-bound sizes;
    on an NVSwitch that runs NVLS, also the switch's pipeline fill from the climbing sizes, in turn.
    `notice`: why `link` is fitted rather than the one named (link_to_fit), shown with the fit."""
    spec = catalog.link(link, key="--link")
    rows = [(log, p) for log in logs for p in log.points]
    fit_rows, ramp = bandwidth_bound(logs), ramp_rows(logs)
    busbw = busbw_of(logs, topologies)
    efficiency = solve_field(busbw, catalog, link, "efficiency", fit_rows, EFFICIENCY_RANGE, True)
    if efficiency is None:
        raise InputError(f"the simulated bus bandwidth does not depend on '{link}' here (it is not on the "
                         f"collective's path, or another link or algorithm bounds it); calibrate the link the "
                         "run crossed, e.g. the NVSwitch for NVLS all-reduce", key="--link")
    fitted, efficiency, switch, ramp = _with_fill(busbw, catalog, link, efficiency, logs, topologies, fit_rows, ramp)
    before, after = busbw(catalog, rows), busbw(fitted, rows)
    sources = ", ".join(sorted({log.file for log in logs}))
    note = (f"efficiency fitted by scalesim calibrate on {sources}: nccl-tests busbw at sizes >= "
            f"{_size(FIT_MIN_BYTES)} on the plateau (within {PLATEAU:.0%} of the highest busbw)")
    if efficiency in EFFICIENCY_RANGE:
        note += f" (at the bound {efficiency}: the measurements lie outside what the link can explain)"

    def checks(used) -> tuple[Check, ...]:
        return tuple(Check(f"{log.op} {log.gpus} GPUs {_size(p.size_bytes)}", "GB/s busbw", p.busbw_GBps, b, a,
                           (log, p) in used) for (log, p), b, a in zip(rows, before, after))

    if notice:
        note += f"; in place of the --link named: {notice}"
    fits = [Fit(link, "efficiency", spec.efficiency, efficiency, checks(fit_rows), note, notice)]
    if switch:
        fits.append(Fit(switch, "nvls_pipeline_fill", catalog.link(switch).nvls_pipeline_fill,
                        fitted.link(switch).nvls_pipeline_fill, checks(ramp),
                        f"nvls_pipeline_fill fitted by scalesim calibrate on {sources}: nccl-tests busbw at sizes "
                        f">= {_size(RAMP_MIN_BYTES)} below the plateau, in turn with {link}'s efficiency"))
    return fits


def ramp_rows(logs: list[NcclTestsLog]) -> list[tuple[NcclTestsLog, BusbwPoint]]:
    """The (log, point) rows a pipeline-fill fit uses: sizes >= RAMP_MIN_BYTES not in bandwidth_bound."""
    flat = bandwidth_bound(logs)
    return [(log, p) for log in logs for p in log.points if p.size_bytes >= RAMP_MIN_BYTES and (log, p) not in flat]


def bandwidth_bound(logs: list[NcclTestsLog]) -> list[tuple[NcclTestsLog, BusbwPoint]]:
    """The (log, point) rows a link fit uses: sizes >= FIT_MIN_BYTES on each log's plateau
    (busbw within PLATEAU of its highest); without such sizes, those >= FIT_MIN_BYTES, else the
    largest third of all rows."""
    rows = [(log, p) for log in logs for p in log.points]
    large = [(log, p) for log, p in rows if p.size_bytes >= FIT_MIN_BYTES]
    peak = {log.file: max((p.busbw_GBps for lg, p in large if lg is log), default=0.0) for log in logs}
    flat = [(log, p) for log, p in large if p.busbw_GBps >= (1 - PLATEAU) * peak[log.file]]
    return flat or large or rows[-max(1, len(rows) // 3):]


def _bisect(f: Callable[[float], float], low: float, high: float) -> float:
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    return round((low + high) / 2, 4)


def _size(size_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes:g} B"


# ---------------------------------------------------------------- the command

def calibrate(paths: list[Path], *, out: Path, link: str | None = None, gpu: str | None = None,
              topology: str | None = None, op: str | None = None, catalog: Catalog | None = None) -> list[Fit]:
    """Fit what the measurements constrain and write the overlay folder `out`; the fits, for the report."""
    catalog = catalog or builtin_catalog()
    check_overlay_folder(out)
    logs, gemms, bandwidths = read_measurements(paths, op)
    fits: list[Fit] = []
    if logs:
        designs = [design_for_log(log, topology, catalog) for log in logs]
        name = link or default_link(logs[0], designs[0], catalog)
        network = name if catalog.link(name, key="--link").kind in NETWORK_KINDS else None

        def topologies(cat: Catalog) -> list[Topology]:
            return [log_topology(lg, d, network, cat) for lg, d in zip(logs, designs)]
        name, notice = link_to_fit(link, name, logs, topologies, catalog)
        fits.extend(fit_link(logs, name, topologies, catalog, notice))
    if gemms or bandwidths:
        if gpu is None and not logs:
            raise InputError("GEMM and bandwidth figures need --gpu NAME (the catalog GPU they were measured on)",
                             key="--gpu")
        spec = catalog.gpu(gpu, key="--gpu") if gpu else catalog.resolve_gpu(designs[0].gpu)
        for fp8 in (False, True):
            rows = [p for p in gemms if (p.precision == "fp8") == fp8]
            if rows:
                fits.append(fit_gemm(rows, spec, fp8))
        if bandwidths:
            fits.append(fit_memory(bandwidths, spec))
    if not fits:
        raise InputError("no measurements found in the files given")
    write_overlay(out, fits, catalog, [str(p) for p in paths])
    return fits


OVERLAY_HEADER = "# Written by scalesim calibrate; pass this folder with --catalog.\n"


def check_overlay_folder(out: Path) -> None:
    """Refuse an --out folder whose gpus.yaml or links.yaml calibrate did not write: merging into it
    would rewrite the user's file (its comments and layout lost, a file that is no mapping dropped)."""
    for filename in ("links.yaml", "gpus.yaml"):
        path = out / filename
        if not path.exists():
            continue
        mine = path.is_file() and path.read_bytes()[:len(OVERLAY_HEADER)] == OVERLAY_HEADER.encode()
        if not mine:
            raise InputError(f"{path} was not written by scalesim calibrate and would be rewritten; give a new "
                             f"folder and use both: --catalog {out} --catalog NEW (later folders win)", key="--out")


def write_overlay(out: Path, fits: list[Fit], catalog: Catalog, sources: list[str]) -> None:
    """`{name: {base: name, field: value}}` entries into out/links.yaml and out/gpus.yaml (merged)."""
    out.mkdir(parents=True, exist_ok=True)
    for filename, is_link in (("links.yaml", True), ("gpus.yaml", False)):
        mine = [f for f in fits if (f.entry in catalog.links()) == is_link]
        if not mine:
            continue
        path = out / filename
        entries = read_yaml(path, what="catalog file") if path.is_file() else {}
        entries = entries if isinstance(entries, dict) else {}
        for fit in mine:
            entry = dict(entries.get(fit.entry) or {"base": fit.entry})
            entry[fit.field] = fit.after
            if fit.field.endswith("gemm_efficiency"):
                # fitted through the part's training clock: pinned with it, so a later catalog's
                # clock cannot change the GEMM rate the user measured
                entry.setdefault("training_clock_fraction", catalog.gpu(fit.entry).training_clock_fraction)
            entry["notes"] = [*entry.get("notes", []), f"{fit.note} (was {fit.before:g})"]
            entry["source"] = sorted({*entry.get("source", []), *(f"measured: {s}" for s in sources)})
            entries[fit.entry] = entry
        path.write_text(OVERLAY_HEADER + dump_entries(entries), encoding="utf-8")
