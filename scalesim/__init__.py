"""scalesim: simulate multi-GPU deep-learning training clusters.

Layers (imports flow downward only): hardware -> topology -> collectives;
models -> costs -> parallel; engine plays what parallel produced; result and
report read results; cli only wires.
"""

__version__ = "0.1.0"
