"""Grace hosts issue eager PyTorch ops slower than the x86 hosts scalesim's default cost was measured on.

TransformerEngine issue #2053 times one torch.nn.Linear forward's CPU side at 37.08 us on GB200 and 13.48 us
on an H100 DGX (Xeon 8480C): every node design whose host is a Grace (its LPDDR5X memory) must say so, the
shipped ones and the ones written inline in validation scenarios alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scalesim.costs.host import DISPATCH_S_PER_OP
from scalesim.topology.design import builtin_topology_dir, load_node_design

ROOT = Path(__file__).resolve().parents[2]
# Host memory parts of designs whose CPU is a Grace (72 Neoverse V2 cores): GB200/GB300 NVL72 trays and the
# GB300 DGX Station. DGX Spark (GB10's Cortex-X925) and Vera Rubin (Vera's own cores) are other CPUs.
GRACE_MEMORIES = {"lpddr5x-grace", "lpddr5x-station"}


def grace_hosts() -> list[tuple[str, dict]]:
    """(where, host mapping) of every node design whose host is a Grace."""
    found = []
    for path in sorted(builtin_topology_dir().glob("*.yaml")):
        host = yaml.safe_load(path.read_text()).get("host") or {}
        found.append((path.name, host))
    for path in sorted((ROOT / "validation" / "scenarios").glob("*.yaml")):
        node = (yaml.safe_load(path.read_text()).get("cluster") or {}).get("node")
        if isinstance(node, dict):
            found.append((path.name, node.get("host") or {}))
    return [(where, host) for where, host in found if str(host.get("memory")) in GRACE_MEMORIES]


def test_there_are_grace_designs_to_check():
    names = {where for where, _ in grace_hosts()}
    assert {"gb200-nvl72.yaml", "gb300-nvl72.yaml"} <= names


@pytest.mark.parametrize("where,host", grace_hosts(), ids=[w for w, _ in grace_hosts()])
def test_a_grace_host_dispatches_slower_than_the_x86_default(where, host):
    assert host.get("dispatch_us_per_op") is not None, f"{where}: Grace host without dispatch_us_per_op"
    assert host["dispatch_us_per_op"] * 1e-6 > DISPATCH_S_PER_OP


def test_an_x86_node_keeps_the_measured_default():
    assert load_node_design("hgx-b200").host.dispatch_us_per_op is None
    grace = load_node_design("gb200-nvl72").host.dispatch_us_per_op * 1e-6
    assert grace > DISPATCH_S_PER_OP
