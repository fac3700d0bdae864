"""Parallel plans turned into per-rank programs of compute and collectives."""

from scalesim.parallel.builder import StepBuilder, build_program
from scalesim.parallel.parallel_plan import ParallelPlan
from scalesim.parallel.ddp import ddp_buckets
from scalesim.parallel.placement import Placement

__all__ = ["ParallelPlan", "Placement", "StepBuilder", "build_program", "ddp_buckets"]
