"""scalesim: simulate multi-GPU deep-learning training clusters.

Layers (imports flow downward only): hardware -> topology -> collectives;
models -> costs -> parallel; engine plays what parallel produced; result and
report read results; cli only wires.
"""

__version__ = "0.1.0"

from scalesim.errors import InputError  # noqa: E402  (the one error type of every public entry point)

__all__ = ["InputError", "__version__"]
