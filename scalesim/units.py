"""Parse quantities with units, once, at the edge.

Inside scalesim everything is SI: seconds, bytes, bytes/s, FLOP, FLOP/s, watts.
Users write "25 GB/s", "400 Gb/s", "80 GiB", "2 us", "989.4 TFLOPS" in YAML and
on the command line; this module turns them into floats. Bits are converted to
bytes here and nowhere else.

>>> parse_bandwidth("400 Gb/s")
50000000000.0
>>> parse_bytes("80 GiB") == 80 * 2**30
True
>>> parse_time("2 us")
2e-06
>>> parse_bytes("64M")
67108864.0
"""

from __future__ import annotations

import math
import re

from scalesim.errors import InputError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_RE = re.compile(r"^\s*" + _NUM + r"\s*([A-Za-z/µ]*)\s*$")


def _split(text: str | float | int, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise InputError(f"expected a {what}, got {text!r}")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _RE.match(str(text))
        if not m:
            raise InputError(f"cannot read {text!r} as a {what}")
        value, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(value * 1e18):   # .inf, .nan, '1e400 GB/s', '1e300 GiB' (inf once scaled by its unit)
        raise InputError(f"expected a finite {what}, got {text!r}")
    return value, unit


def parse_bytes(text: str | float | int) -> float:
    """Size in bytes. Bare 'M', 'G' in sizes mean binary multiples (nccl-tests style).

    Accepts B, KB/MB/GB/TB (decimal), KiB/MiB/GiB/TiB (binary), and K/M/G/T
    without B (binary, as nccl-tests' ``-b 8M``). A bare number is bytes.
    """
    value, unit = _split(text, "size (e.g. '80 GiB', '64M')")
    if unit in ("", "B"):
        return value
    if unit.endswith("iB") and unit[:-1] in _BIN:
        return value * _BIN[unit[:-1]]
    if unit.endswith("B") and unit[:-1] in _DEC:
        return value * _DEC[unit[:-1]]
    if unit in ("K", "k", "M", "G", "T"):
        return value * _BIN[unit.upper() + "i"]
    raise InputError(f"unknown size unit '{unit}' in {text!r}; use B, KB, MB, GB, KiB, MiB, GiB, or 8M-style")


def parse_bandwidth(text: str | float | int) -> float:
    """Bandwidth in bytes/s from 'GB/s' (bytes) or 'Gb/s' / 'Gbps' (bits). A bare number is bytes/s."""
    value, unit = _split(text, "bandwidth (e.g. '25 GB/s', '400 Gb/s')")
    if unit == "":
        return value
    u = unit.replace("ps", "/s")
    if not u.endswith("/s"):
        raise InputError(f"bandwidth {text!r} needs a per-second unit such as GB/s or Gb/s")
    u = u[:-2]
    if u.endswith("iB") and u[:-1] in _BIN:
        return value * _BIN[u[:-1]]
    if u.endswith("B") and u[:-1] in _DEC:
        return value * _DEC[u[:-1]]
    if u.endswith("b") and u[:-1] in _DEC:
        return value * _DEC[u[:-1]] / 8.0
    raise InputError(f"unknown bandwidth unit '{unit}' in {text!r}; use B/s, MB/s, GB/s, TB/s, Mb/s, Gb/s")


def parse_time(text: str | float | int) -> float:
    """Duration in seconds from 's', 'ms', 'us'/'µs', 'ns', 'min', 'h'. A bare number is seconds."""
    value, unit = _split(text, "duration (e.g. '2 us', '1.5 ms')")
    scale = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
             "min": 60.0, "h": 3600.0, "d": 86400.0}
    if unit not in scale:
        raise InputError(f"unknown time unit '{unit}' in {text!r}; use ns, us, ms, s, min, h, d")
    return value * scale[unit]


def parse_flops(text: str | float | int) -> float:
    """Rate in FLOP/s from 'TFLOPS', 'PFLOPS', 'GFLOPS'. A bare number is FLOP/s."""
    value, unit = _split(text, "compute rate (e.g. '989.4 TFLOPS')")
    u = unit.upper().replace("FLOP/S", "FLOPS")
    if u in ("", "FLOPS"):
        return value
    if u.endswith("FLOPS") and u[:-5] in ("K", "M", "G", "T", "P"):
        return value * _DEC[u[:-5]]
    raise InputError(f"unknown compute unit '{unit}' in {text!r}; use GFLOPS, TFLOPS, PFLOPS")


def format_usd(amount: float) -> str:
    """Dollars: cents below $100, whole dollars up to a trillion, powers of ten beyond.

    >>> format_usd(28.291), format_usd(27792), format_usd(3.2e15)
    ('$28.29', '$27,792', '$3.20e+15')
    """
    if abs(amount) >= 1e12:
        return f"${amount:.2e}"
    return f"${amount:,.0f}" if abs(amount) >= 100 else f"${amount:,.2f}"


def format_bytes(size_bytes: float) -> str:
    """Human-readable binary size, as nccl-tests and nvidia-smi show memory.

    >>> format_bytes(24 * 2**30)
    '24.0 GiB'
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size_bytes) >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes:.0f} B"


YEAR_S = 365.25 * 86400


def format_time(seconds: float) -> str:
    """Human-readable duration; beyond a year in years, beyond a million years in powers of ten.

    >>> format_time(0.0123)
    '12.30 ms'
    >>> format_time(90000)
    '1.04 d'
    >>> format_time(3e20)
    '9.51e+12 years'
    """
    if seconds >= 1e6 * YEAR_S:
        return f"{seconds / YEAR_S:.2e} years"
    if seconds >= YEAR_S:
        return f"{seconds / YEAR_S:,.2f} years"
    if seconds >= 86400:
        return f"{seconds / 86400:.2f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.2f} min"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"
