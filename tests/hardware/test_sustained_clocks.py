"""Sustained training clocks of power-limited parts: invariants of the DVFS mechanism the catalog uses."""

from __future__ import annotations

from scalesim.hardware import gpus


def test_hopper_parts_with_less_power_per_sm_sustain_lower_clocks():
    # DVFS: a power-limited part's dynamic power grows with its switching SMs and ~f^3, so among
    # Hopper parts whose sustained training clock is set, fewer watts per SM above idle never hold
    # a higher clock (the H100 PCIe at 350 W over 114 SMs below the 500 W and 700 W SXM parts).
    parts = [g for g in gpus().values() if g.arch == "hopper" and g.training_clock_fraction != 1.0]
    assert {g.name for g in parts} >= {"h100-pcie", "h100-sxm", "h100-sxm-96gb-500w"}
    by_power = sorted(parts, key=lambda g: (g.tdp_w - g.idle_w) / g.sms)
    clocks = [g.sm_clock_hz * g.training_clock_fraction for g in by_power]
    assert clocks == sorted(clocks)
    # ...and no part is credited above its boost clock under a training load.
    assert all(g.training_clock_fraction <= 1.0 for g in parts)
