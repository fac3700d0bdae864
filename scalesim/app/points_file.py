"""The sweep's points file: each simulated plan as one JSON line, written as it finishes.

A sweep of hours can be stopped (Ctrl-C, a lost machine) and resumed: with
`--resume` a plan whose row is already in the file is not simulated again.
A row is matched by a stable key: a digest of the validated scenario (so an
edited scenario never reuses old results, and a moved file still does), the
GPU count and the plan's fields. Only simulated plans are written (the checks
and the pruning before them are cheap and are redone); a `failed` row is
retried. Lines are flushed one by one; a line cut short by the interruption
is skipped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TextIO

from scalesim.errors import InputError

NAME = "points.jsonl"
PLAN_FIELDS = ("gpus", "dp", "tp", "pp", "cp", "zero", "micro_batch", "recompute")
EXTRA_FIELDS = ("scenario_file", "scenario_sha256")     # on each line, not in the sweep's rows
RETRIED = ("failed",)


def scenario_digest(scenario) -> str:
    """SHA-256 of the validated scenario (every field, defaults included), as hex."""
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def point_key(digest: str, plan: dict) -> str:
    """The key of one plan of one scenario: 'digest gpus dp tp pp cp zero micro_batch recompute'."""
    return " ".join([digest] + [str(plan[f]) for f in PLAN_FIELDS])


class PointsFile:
    """Rows of earlier runs of one scenario (by key) and an append-only sink for new ones."""

    def __init__(self, path: Path, scenario, scenario_file: str | None = None, *, resume: bool = False,
                 force: bool = False):
        if resume and force:
            raise InputError("--resume continues the points file and --force discards it; give one",
                             key="--resume")
        self.path = path
        self.digest = scenario_digest(scenario)
        self.scenario_file = scenario_file
        self.reused = 0
        self._fh: TextIO | None = None
        if force and path.exists():
            path.unlink()
        if path.is_file() and not _written_by_a_sweep(path):
            raise InputError(f"{path} exists and scalesim did not write it (no sweep's rows); remove it, give another "
                             "--out, or --force to discard it (scalesim overwrites only files it wrote)", key="--out")
        self.rows: dict[str, dict] = self._read() if path.exists() else {}
        if self.rows and not resume:
            raise InputError(f"{path} holds {len(self.rows)} simulated plans of an earlier sweep; add --resume "
                             "to continue it (plans already simulated are reused) or --force to start over",
                             key="--out")

    def _read(self) -> dict[str, dict]:
        rows: dict[str, dict] = {}
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue                    # cut short by an interruption
            if not isinstance(data, dict) or not all(k in data for k in (*EXTRA_FIELDS, *PLAN_FIELDS)):
                continue
            key = point_key(data["scenario_sha256"], data)
            rows[key] = {k: v for k, v in data.items() if k not in EXTRA_FIELDS}   # a later line wins
        return rows

    def finished(self, plan: dict) -> dict | None:
        """The row an earlier run found for this plan of this scenario, unless it failed (then retried)."""
        row = self.rows.get(point_key(self.digest, plan))
        if row is None or row.get("status") in RETRIED:
            return None
        self.reused += 1
        return row

    def write(self, row: dict) -> None:
        """Append one finished row and flush it, so an interruption keeps it."""
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cut_short = self.path.exists() and self.path.stat().st_size > 0 and not _ends_a_line(self.path)
            self._fh = self.path.open("a")
            if cut_short:
                self._fh.write("\n")
        line = {"scenario_file": self.scenario_file, "scenario_sha256": self.digest, **row}
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()
        self.rows[point_key(self.digest, row)] = row

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> PointsFile:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def _written_by_a_sweep(path: Path) -> bool:
    """Empty, or its first line is a row `write` began (even one an interruption cut short)."""
    with path.open("rb") as fh:
        head = fh.read(len(_ROW_START))
    return not head or head == _ROW_START


_ROW_START = b'{"scenario_file": '


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"
