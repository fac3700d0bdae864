"""Collective operations expanded onto topology graphs as flows.

Algorithms: ring (ring.py), double binary tree (tree.py), NVLS in-switch
reduction (nvls.py), hierarchical (hierarchical.py), direct point-to-point
(p2p.py); protocols and NCCL's latency model in protocol.py; `auto` in
select.py.
"""

from scalesim.collectives.busbw import algbw_bytes_per_s, bus_factor, busbw_bytes_per_s
from scalesim.collectives.estimate import plan_time_s
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.collectives.select import ALGOS, LATENCY_BOUND_BYTES, OPS, links_crossed, plan_collective

__all__ = ["ALGOS", "LATENCY_BOUND_BYTES", "OPS", "CollectivePlan", "Flow", "Phase", "algbw_bytes_per_s", "bus_factor",
           "busbw_bytes_per_s", "links_crossed", "plan_collective", "plan_time_s"]
