"""The discrete-event engine: the only package that imports simpy.

Simulated time is in seconds. Ranks' streams are simpy processes; transfers
are fluid flows that share link bandwidth max-min fairly. Steps whose ranks repeat
a block of tasks are fast-forwarded through the repeats (fast_forward.py) unless
`exact_simulation` or `simulate(..., exact=True)` asks for every task.
"""

from scalesim.fairshare import max_min_rates
from scalesim.engine.fast_forward import exact_simulation
from scalesim.engine.simulator import simulate, step_time_s
from scalesim.timeline import Interval, Timeline

__all__ = ["Interval", "Timeline", "exact_simulation", "max_min_rates", "simulate", "step_time_s"]
