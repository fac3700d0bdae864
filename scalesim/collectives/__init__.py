"""Collective operations expanded onto topology graphs as flows."""

from scalesim.collectives.busbw import OPS, algbw_bytes_per_s, bus_factor, busbw_bytes_per_s
from scalesim.collectives.plan import CollectivePlan, Flow, Phase
from scalesim.collectives.select import plan_collective

__all__ = ["OPS", "CollectivePlan", "Flow", "Phase", "algbw_bytes_per_s", "bus_factor",
           "busbw_bytes_per_s", "plan_collective"]
