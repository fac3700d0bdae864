"""Orchestration: from a scenario file to the numbers each command prints.

Each module is one command's work (run, compare, sweep, validate, serve, calibrate)
or a piece they share (fitting, procurement, uncertainty, executors); they wire the
layers below and never draw (report/ does).
"""
