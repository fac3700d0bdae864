"""Parallel plans turned into per-rank programs of compute and collectives."""

from scalesim.parallel.ddp import DdpPlan, build_ddp_program, ddp_buckets

__all__ = ["DdpPlan", "build_ddp_program", "ddp_buckets"]
