"""Ctrl-C: every command stops with one line on stderr and exit 130 (128 + SIGINT, as shells
report it), never click's "Aborted!" with exit 1, never a traceback, also when the signal comes
twice (a second key press, or `timeout -s INT`, which signals the process and then its group)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from scalesim.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "scenarios" / "8x4090-ddp.yaml")


def _interrupted(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("module, args", [
    ("training_commands", ["run", SCENARIO, "--no-plots"]),
    ("training_commands", ["compare", SCENARIO, SCENARIO, "--no-plots"]),
    ("measurement_commands", ["validate", "--fast", "--workers", "1"]),
])
def test_an_interrupted_command_exits_130_with_one_line(monkeypatch, module, args):
    monkeypatch.setattr(f"scalesim.cli.{module}.catalog_from", _interrupted)     # looked up as each command runs
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 130
    assert "Aborted" not in result.output
    assert "interrupted" in result.output


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_second_sigint_while_the_sweep_stops_prints_no_traceback(tmp_path):
    """The first SIGINT stops the sweep; the second lands while Python shuts down (here: while it
    joins a thread still running). It used to raise KeyboardInterrupt there too."""
    done = _python(f"""
        import os, signal, threading, time
        import scalesim.app.sweep as sweep

        def twice():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)

        def interrupted_sweep(*args, **kwargs):
            threading.Thread(target=twice).start()      # not a daemon: the shutdown waits for it
            time.sleep(30)

        sweep.run_sweep = interrupted_sweep
        from scalesim.cli import main
        main(["sweep", {SCENARIO!r}, "--gpus", "8", "--out", "out", "--no-plots"])
        """, tmp_path)
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="no forkserver here")
def test_the_sweep_pools_forkserver_ignores_sigint_while_it_starts(tmp_path):
    """Ctrl-C reaches the whole process group; a forkserver still importing the sweep (its
    preload) died with a KeyboardInterrupt traceback. It is started with SIGINT ignored."""
    done = _python("""
        import multiprocessing.forkserver as fs, os, signal, threading, time
        from scalesim.app.executors import ExecutorSpec, open_pool

        def interrupt_forkserver():
            while fs._forkserver._forkserver_pid is None:
                time.sleep(0.001)
            os.kill(fs._forkserver._forkserver_pid, signal.SIGINT)

        threading.Thread(target=interrupt_forkserver, daemon=True).start()
        with open_pool(ExecutorSpec("local", 2)) as pool:
            print(pool.executor.submit(abs, -1).result())
        """, tmp_path)
    assert "KeyboardInterrupt" not in done.stderr, done.stderr
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
