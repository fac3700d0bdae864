"""nccl-tests in simulation: time one collective at a range of sizes on a topology.

Wiring like `runner`: it builds plans with `collectives` and times them with
the engine; the CLI's `collective` command and the tests call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scalesim.collectives import busbw_bytes_per_s, plan_collective
from scalesim.collectives.busbw import algbw_bytes_per_s
from scalesim.engine import simulate
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import Catalog
from scalesim.program import CollectiveTask, Program
from scalesim.scenario import load_scenario
from scalesim.topology import Fabric, Topology, build_cluster, load_node_design
from scalesim.topology.design import NodeDesign, read_yaml
from scalesim.units import parse_bytes


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    topology: str
    op: str
    algo: str
    gpus: int
    bytes: float
    time_s: float
    protocol: str = "simple"

    @property
    def algbw_GBps(self) -> float:
        return algbw_bytes_per_s(self.bytes, self.time_s) / 1e9

    @property
    def busbw_GBps(self) -> float:
        return busbw_bytes_per_s(self.op, self.gpus, self.bytes, self.time_s) / 1e9

    def to_json(self) -> dict:
        return {"op": self.op, "algo": self.algo, "gpus": self.gpus, "bytes": self.bytes,
                "time_s": self.time_s, "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
                "protocol": self.protocol, "topology": self.topology}


def parse_sizes(text: str) -> list[float]:
    """'8:8G' doubles from 8 B to 8 GiB (nccl-tests -b 8 -e 8G -f 2); '1M,64M' lists sizes.

    >>> parse_sizes("1K:8K")
    [1024.0, 2048.0, 4096.0, 8192.0]
    """
    try:
        if ":" in text:
            low, high = (parse_bytes(part) for part in text.split(":", 1))
            if low <= 0 or high < low:
                raise InputError("the range must go from a positive size up to a larger one")
            sizes, size = [], low
            while size <= high * (1 + 1e-12):
                sizes.append(size)
                size *= 2
            return sizes
        sizes = [parse_bytes(part) for part in text.split(",") if part.strip()]
    except InputError as exc:
        raise InputError(f"{exc.detail} (e.g. --sizes 8:8G or --sizes 1M,64M)", key="--sizes") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise InputError("sizes must be positive, e.g. --sizes 8:8G or --sizes 1M,64M", key="--sizes")
    return sizes


def resolve_design(spec: str, catalog: Catalog | None = None) -> tuple[NodeDesign, Fabric | None, int]:
    """A node design from a topology name or file, or the cluster (design, fabric, nodes) of a scenario file."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        data = read_yaml(path, what="file")
        if isinstance(data, dict) and "cluster" in data:
            scenario, file = load_scenario(path)
            cluster = scenario.cluster
            fabric = None if cluster.fabric is None else cluster.fabric.as_fabric()
            return (load_node_design(cluster.node, key="cluster.node", file=file, catalog=catalog), fabric,
                    cluster.nodes)
    return load_node_design(spec, key="--topology", catalog=catalog), None, 1


def build_topology(spec: str, *, p2p: bool | None = None, nodes: int = 1,
                   fabric: Fabric | None = None, catalog: Catalog | None = None) -> Topology:
    """The cluster to time collectives on; a scenario file brings its own nodes and fabric.
    GPU and link names resolve in `catalog` [the built-in one]."""
    design, scenario_fabric, scenario_nodes = resolve_design(spec, catalog)
    if p2p is not None:
        design = design.model_copy(update={"p2p": p2p})
    if nodes == 1 and scenario_nodes > 1:
        nodes, fabric = scenario_nodes, fabric or scenario_fabric
    if nodes > 1 and fabric is None:
        raise InputError("several nodes need a fabric: add --fabric LINK (e.g. ib-ndr)", key="--fabric")
    try:
        return build_cluster(design, nodes=nodes, fabric=fabric, catalog=catalog)
    except InputError as exc:
        raise as_option(exc) from None


_OPTION_OF = {"cluster.nodes": "--nodes", "cluster.fabric.link": "--fabric",
              "cluster.fabric.topology": "--fabric-topology", "cluster.fabric.nics_per_node": "--nics-per-node",
              "op": "--op", "algo": "--algo", "protocol": "--protocol"}


def as_option(exc: InputError) -> InputError:
    """The error naming the `collective` option the user gave rather than the scenario or plan key it
    sets (--algo, not algo); an error in a file keeps its key."""
    if exc.file is not None or exc.key not in _OPTION_OF:
        return exc
    return InputError(exc.detail, key=_OPTION_OF[exc.key])


def time_collective(topology: Topology, op: str, gpus: int, size_bytes: float, algo: str = "auto",
                    protocol: str = "auto") -> CollectiveRow:
    if gpus > len(topology.gpus) or gpus < 1:
        raise InputError(f"{topology.name} has {len(topology.gpus)} GPUs; allowed: 1..{len(topology.gpus)}",
                         key="--gpus")
    plan = plan_collective(op, topology, tuple(range(gpus)), size_bytes, algo, protocol)
    program = Program({r: (CollectiveTask(op, "bench", plan),) for r in plan.ranks},
                      topology.capacity_bytes_per_s)
    return CollectiveRow(topology.name, op, plan.algo, gpus, size_bytes, simulate(program).end_s, plan.protocol)


def thin_sizes(sizes: list[int], count: int) -> list[int]:
    """At most `count` of `sizes`, evenly spaced, the smallest and largest kept (only the largest for one).

    >>> thin_sizes([1, 2, 4, 8, 16, 32, 64], 4)
    [1, 4, 16, 64]
    >>> thin_sizes([1, 2, 4], 5)
    [1, 2, 4]
    >>> thin_sizes([1, 2, 4], 1)
    [4]
    """
    if count >= len(sizes):
        return list(sizes)
    if count <= 1:
        return [sizes[-1]]
    stride = -(-(len(sizes) - 1) // (count - 1))
    kept = sizes[::stride]
    return kept if kept[-1] == sizes[-1] else kept[:count - 1] + [sizes[-1]]
