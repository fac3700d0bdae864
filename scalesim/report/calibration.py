"""Tables for `scalesim calibrate`: each fitted value, and the user's figures before and after."""

from __future__ import annotations

import statistics

from rich.table import Table


def _error(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured:+.1%}"


def calibration_tables(fits) -> list[Table]:
    """One table per fit (scalesim.app.calibrate.Fit): its rows and the median |error| of the fitted rows."""
    tables = []
    for fit in fits:
        fitted = [c for c in fit.checks if c.fitted]
        before = statistics.median(abs(c.before - c.measured) / c.measured for c in fitted)
        after = statistics.median(abs(c.after - c.measured) / c.measured for c in fitted)
        t = Table(title=f"{fit.entry}.{fit.field}: {fit.before:g} -> {fit.after:g} "
                        f"(median |error| on the fitted rows {before:.1%} -> {after:.1%})", title_justify="left")
        for col in ("measurement", "measured", "catalog before", "error", "calibrated", "error", "fitted"):
            t.add_column(col, no_wrap=True)
        for c in fit.checks:
            t.add_row(c.what, f"{c.measured:,.1f} {c.unit}", f"{c.before:,.1f}", _error(c.before, c.measured),
                      f"{c.after:,.1f}", _error(c.after, c.measured), "yes" if c.fitted else "-")
        tables.append(t)
    return tables
