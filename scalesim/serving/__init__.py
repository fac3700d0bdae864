"""LLM serving as data and policy: scenario specs, request workloads, the batching scheduler
and latency metrics. Time comes from `scalesim.costs.inference`; the engine
(`scalesim.engine.serving`) plays requests out; `scalesim.app.serve` wires them.
"""
