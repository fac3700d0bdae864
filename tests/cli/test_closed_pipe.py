"""`scalesim ... | head`: the reader closes the pipe early; the command stops quietly, without an
"error:" line (that is for bad input, exit 2) and without a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["models", "--json"],
                                  ["run", "scenarios/8x4090-ddp.yaml", "--json", "--no-plots", "--no-scaling"]])
def test_a_closed_pipe_is_not_reported_as_bad_input(args):
    read_end, write_end = os.pipe()
    os.close(read_end)                       # the reader is gone before the first byte
    try:
        done = subprocess.run([sys.executable, "-m", "scalesim", *args], cwd=ROOT, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write_end)
    assert done.returncode not in (0, 2)
    assert "error" not in done.stderr and "Traceback" not in done.stderr
