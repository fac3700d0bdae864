"""A user's own measurements, as their tools print them: nccl-tests output and a benchmark CSV.

nccl-tests (all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf,
reduce_perf, alltoall_perf, sendrecv_perf; rccl-tests prints the same) is read as
printed: the "Using devices" lines give the ranks, their hosts and the GPU name;
the column header ("size count type redop root time algbw busbw ...") locates
the out-of-place busbw of every data row. The collective comes from "Collective
test starting: X_perf" (nccl-tests 2.13+), else from the last data row where nccl-tests'
own columns tell it (`infer_op`), else it must be given.

GEMM and memory-bandwidth benchmarks are read from a CSV with this header
(one measurement per row, '#' lines are comments):

    kind,precision,m,n,k,value
    gemm,bf16,8192,8192,8192,780.5      # value: achieved TFLOP/s of an m x k by k x n GEMM
    membw,,,,,2850                      # value: achieved GB/s of a streaming copy (read + write)

which is what mamf-finder's best-shape line and a STREAM/copy benchmark report.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from scalesim.errors import InputError

# nccl-tests binary -> scalesim collective.
NCCL_TESTS_OPS = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
                  "reduce_scatter_perf": "reduce_scatter", "broadcast_perf": "broadcast", "reduce_perf": "reduce",
                  "alltoall_perf": "all_to_all", "sendrecv_perf": "send_recv"}
CSV_HEADER = ("kind", "precision", "m", "n", "k", "value")
GEMM_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")     # GpuSpec.peak_flop_per_s's
_RANK = re.compile(r"^\s*#?\s*Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_TEST = re.compile(r"Collective test starting:\s*(\w+)")


@dataclass(frozen=True, slots=True)
class BusbwPoint:
    size_bytes: float
    busbw_GBps: float


@dataclass(frozen=True, slots=True)
class NcclTestsLog:
    file: str
    op: str
    hosts: tuple[str, ...]          # host of each rank, in rank order
    device: str                     # GPU name as the log prints it
    points: tuple[BusbwPoint, ...]

    @property
    def gpus(self) -> int:
        return len(self.hosts)

    @property
    def nodes(self) -> int:
        return len(set(self.hosts))


@dataclass(frozen=True, slots=True)
class GemmPoint:
    precision: str
    m: int
    n: int
    k: int
    tflops: float


@dataclass(frozen=True, slots=True)
class BandwidthPoint:
    GBps: float


def parse_nccl_tests(text: str, file: str, op: str | None = None) -> NcclTestsLog:
    """The busbw curve of one nccl-tests run. `op` names the collective when the log does not."""
    ranks: dict[int, tuple[str, str]] = {}
    columns: list[str] | None = None
    points: list[BusbwPoint] = []
    found_op = None
    last_row: list[str] | None = None
    for line in text.splitlines():
        if (m := _TEST.search(line)) and m.group(1) in NCCL_TESTS_OPS:
            found_op = NCCL_TESTS_OPS[m.group(1)]
        elif (m := _RANK.match(line)):
            ranks[int(m.group(1))] = (m.group(2), m.group(3))
        elif "busbw" in line and "size" in line:          # the column header ('#' before nccl-tests 2.x)
            columns = line.lstrip("#").split()
        elif not line.lstrip().startswith("#") and line.split() and line.split()[0].isdigit():
            point = _row(line, columns, file)
            if point.busbw_GBps > 0:        # 0.00: below the log's two decimals (tiny sizes), nothing to fit
                points.append(point)
            last_row = line.split()
    op = op or found_op or infer_op(last_row, columns, len(ranks))
    if op is None:
        raise InputError("cannot tell which collective this is (no 'Collective test starting: X_perf' line); "
                         f"give --op, one of: {', '.join(sorted(set(NCCL_TESTS_OPS.values())))}", file=file)
    if not ranks:
        raise InputError("no '#  Rank N ... on HOST device D [...] GPU NAME' lines: is this nccl-tests output?",
                         file=file)
    if not points:
        raise InputError("no data rows (size count type ... busbw ...) with a busbw above 0.00 found" if last_row
                         else "no data rows (size count type ... busbw ...) found", file=file)
    hosts = tuple(ranks[r][0] for r in sorted(ranks))
    return NcclTestsLog(file, op, hosts, ranks[min(ranks)][1], tuple(points))


def infer_op(row: list[str] | None, columns: list[str] | None, ranks: int) -> str | None:
    """The collective a data row can only come from, by nccl-tests' own definitions (src/*.cu,
    *GetBw): busbw is algbw x 2(n-1)/n for all-reduce, x (n-1)/n for reduce-scatter, all-gather and
    all-to-all, x 1 for broadcast, reduce and send/recv; a root (>= 0) marks reduce and broadcast,
    redop 'none' the collectives that do not reduce. None where two fit (all-gather and all-to-all;
    all-reduce and send/recv on 2 ranks) or the row lacks those columns."""
    if not row or not columns or ranks < 2 or not {"redop", "root", "algbw", "busbw"} <= set(columns) \
            or len(row) < len(columns):
        return None
    cell = dict(zip(columns, row))         # the first algbw/busbw columns: out-of-place
    try:
        ratio, root = float(cell["busbw"]) / float(cell["algbw"]), int(cell["root"])
    except (ValueError, ZeroDivisionError):
        return None
    reduces = cell["redop"] != "none"
    factors = {"all_reduce": 2 * (ranks - 1) / ranks, "reduce_scatter": (ranks - 1) / ranks, "one": 1.0}
    fits = [name for name, f in factors.items() if abs(ratio / f - 1) < 0.02]
    if len(fits) != 1 or (fits == ["all_reduce"] and not reduces):
        return None
    if fits == ["one"]:
        return ("reduce" if reduces else "broadcast") if root >= 0 else "send_recv"
    return fits[0] if reduces else None


def _row(line: str, columns: list[str] | None, file: str) -> BusbwPoint:
    parts = line.split()
    try:
        if columns and len(parts) == len(columns):
            point = BusbwPoint(float(parts[0]), float(parts[columns.index("busbw")]))
        else:
            point = BusbwPoint(float(parts[0]), float(parts[-6]))     # ... busbw #wrong | time algbw busbw #wrong
    except (ValueError, IndexError):
        raise InputError(f"cannot read the data row {line.strip()!r}", file=file) from None
    if not (0 <= point.busbw_GBps < math.inf and 0 < point.size_bytes < math.inf):
        raise InputError(f"the data row {line.strip()!r} has a size or busbw that is not a finite number >= 0",
                         file=file)
    return point


def parse_benchmark_csv(text: str, file: str) -> tuple[list[GemmPoint], list[BandwidthPoint]]:
    """GEMM and memory-bandwidth measurements from the documented CSV (module docstring)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and not r[0].lstrip().startswith("#")]
    if not rows or tuple(c.strip() for c in rows[0]) != CSV_HEADER:
        raise InputError(f"a benchmark CSV starts with the header {','.join(CSV_HEADER)}", file=file)
    gemms, bandwidths = [], []
    for number, row in enumerate(rows[1:], start=2):
        cells = dict(zip(CSV_HEADER, (c.split("#")[0].strip() for c in row)))
        try:
            value = float(cells["value"])
            if not 0 < value < math.inf:         # nan, inf, 0, negative
                raise ValueError
            if cells["kind"] == "gemm" and (cells["precision"] or "bf16") not in GEMM_PRECISIONS:
                raise InputError(f"row {number}: unknown precision {cells['precision']!r}; allowed: "
                                 f"{', '.join(GEMM_PRECISIONS)}", file=file, key="precision")
            if cells["kind"] == "gemm":
                gemms.append(GemmPoint(cells["precision"] or "bf16", *_dimensions(cells), value))
            elif cells["kind"] == "membw":
                bandwidths.append(BandwidthPoint(value))
            else:
                raise InputError(f"row {number}: kind must be gemm or membw, got {cells['kind']!r}", file=file,
                                 key="kind")
        except (ValueError, KeyError):
            raise InputError(f"row {number}: expected kind,precision,m,n,k,value with a positive finite value "
                             "(m, n, k positive whole numbers for gemm)", file=file) from None
    return gemms, bandwidths


def _dimensions(cells: dict) -> tuple[int, int, int]:
    """A GEMM row's m, n, k: positive whole numbers (a 0 would divide by zero in the fit)."""
    dims = tuple(int(cells[d]) for d in "mnk")
    if min(dims) <= 0:
        raise ValueError
    return dims


MAX_MEASUREMENT_BYTES = 32 * 2**20     # parsing runs at ~15 MB per CPU second: about 2 s


def read_measurements(paths: list[Path], op: str | None = None
                      ) -> tuple[list[NcclTestsLog], list[GemmPoint], list[BandwidthPoint]]:
    """Every file: a .csv is a benchmark CSV, anything else nccl-tests output."""
    logs, gemms, bandwidths = [], [], []
    for path in paths:
        try:
            if Path(path).stat().st_size > MAX_MEASUREMENT_BYTES:
                raise InputError(f"is larger than {MAX_MEASUREMENT_BYTES // 2**20} MiB; nccl-tests logs are tens of "
                                 f"kB and benchmark CSVs a few MB", file=str(path))
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read the measurement file: {exc.strerror or exc.__class__.__name__}",
                             file=str(path)) from None
        if not text.strip():
            raise InputError("the file is empty; give nccl-tests output as printed (all_reduce_perf, ...) or a .csv "
                             "with the header kind,precision,m,n,k,value", file=str(path))
        if Path(path).suffix.lower() == ".csv":
            g, b = parse_benchmark_csv(text, str(path))
            gemms += g
            bandwidths += b
        else:
            logs.append(parse_nccl_tests(text, str(path), op))
    return logs, gemms, bandwidths
