"""The discrete-event engine: the only package that imports simpy.

Simulated time is in seconds. Ranks' streams are simpy processes; transfers
are fluid flows that share link bandwidth max-min fairly.
"""

from scalesim.fairshare import max_min_rates
from scalesim.engine.simulator import simulate
from scalesim.timeline import Interval, Timeline

__all__ = ["Interval", "Timeline", "max_min_rates", "simulate"]
