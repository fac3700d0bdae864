"""Wall time of expert-parallel all-to-alls in the fluid network, and of the MoE validation cases.

Run: python benchmarks/moe_alltoall.py [--root CHECKOUT] [--cases ID ...] [--limit S]

Part 1 plays all-to-alls of 64 MiB per rank through `FluidNetwork` alone (no program, no
builder): 8 ranks of a DGX H100, 64 GB200 of an NVL72 rack (one NVSwitch domain, as in the
DeepSeek-V3 GB200 cases) and 64 ranks of DGX H100 nodes on NDR (8 nodes, the EP64 of the
DeepSeek-V3 H100 recipes); four calls one after the other as four MoE layers would, and a fifth
of the same plan started while the fourth runs (two micro-batches overlapping). Median of 3; the flows and the simulated time are printed to show
the work is the same. Part 2 times validate's prediction of whole cases (the two DeepSeek-V3
GB200 cases by default), once each, stopped after --limit seconds.

`--root` runs the same measurements on another checkout (e.g. main before a change), so
before/after figures come from one script, back to back.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

DEFAULT_CASES = ("dgxc-deepseek-v3-bf16-128xgb200", "dgxc-deepseek-v3-bf16-256xgb200")
MiB = 2**20


def _network_case(name: str, nodes: int, fabric):
    from scalesim.collectives.p2p import p2p_plan
    from scalesim.topology import build_cluster, load_node_design

    topology = build_cluster(load_node_design(name), nodes=nodes, fabric=fabric)
    ranks = tuple(range(len(topology.gpus)))
    plan = p2p_plan("all_to_all", topology, ranks, 64 * MiB)
    flows = [(f.links, f.size_bytes, f.rate_cap_bytes_per_s) for f in plan.phases[0].flows]
    return topology.capacity_bytes_per_s, flows, len(ranks)


def _play(capacity, flows) -> float:
    import simpy

    from scalesim.engine.network import FluidNetwork

    env = simpy.Environment()
    net = FluidNetwork(env, capacity)

    def layers():
        for _ in range(3):
            yield net.start(flows)
        fourth = net.start(flows)
        yield env.timeout(1e-4)
        yield env.all_of([fourth, net.start(flows)])

    env.process(layers())
    env.run()
    return env.now


def network_table(root: Path) -> None:
    import yaml

    from scalesim.topology import Fabric

    scenario = root / "validation" / "scenarios" / "dgxc-deepseek-v3-bf16-128xgb200.yaml"
    rack = yaml.safe_load(scenario.read_text())["cluster"]["node"]     # 64 GB200 of an NVL72 rack
    cases = [("dgx-h100, 1 node (EP8)", "dgx-h100", 1, None),
             ("gb200 rack, NVSwitch (EP64)", rack, 1, None),
             ("dgx-h100 x 8, NDR fat-tree (EP64)", "dgx-h100", 8, Fabric("ib-ndr", 8, "fat-tree"))]
    print(f"{'all-to-all, 5 calls':<36} {'ranks':>5} {'flows':>6} {'simulated s':>12} {'wall s':>8}")
    for label, design, nodes, fabric in cases:
        capacity, flows, n = _network_case(design, nodes, fabric)
        walls = []
        for _ in range(3):
            start = time.perf_counter()
            simulated = _play(capacity, flows)
            walls.append(time.perf_counter() - start)
        print(f"{label:<36} {n:>5} {len(flows):>6} {simulated:>12.6f} {statistics.median(walls):>8.3f}", flush=True)


def case_table(ids, limit_s: float) -> None:
    from scalesim.app.validate import _predict, load_cases
    from scalesim.limits import time_limit

    cases = {c.id: c for c in load_cases()}
    print(f"\n{'validation case':<40} {'wall s':>8} {'predicted':>10} {'measured':>9} {'error':>7}")
    for case_id in ids:
        case = cases[case_id]
        start = time.perf_counter()
        try:
            with time_limit(limit_s):
                value = _predict(case)[case.metric]
        except Exception as exc:  # noqa: BLE001 - a benchmark reports what stopped it
            print(f"{case_id:<40} {time.perf_counter() - start:>8.1f} stopped: {type(exc).__name__}", flush=True)
            continue
        error = (value - case.measured) / case.measured
        print(f"{case_id:<40} {time.perf_counter() - start:>8.1f} {value:>10.4g} {case.measured:>9.4g} "
              f"{error:>+7.1%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout to measure [this one]")
    parser.add_argument("--cases", nargs="*", default=list(DEFAULT_CASES), help="validation case ids [%(default)s]")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds one case may take [600]")
    args = parser.parse_args()
    sys.path.insert(0, str(args.root.resolve()))
    import scalesim

    print(f"scalesim from {Path(scalesim.__file__).parent}")
    network_table(args.root.resolve())
    if args.cases:
        case_table(args.cases, args.limit)


if __name__ == "__main__":
    main()
