"""Prove a refactor changed no number: `run --json` of every shipped and validation scenario.

    python validation/same_numbers.py --write /tmp/before      # on the old code
    python validation/same_numbers.py --write /tmp/after       # on the new code
    python validation/same_numbers.py --compare /tmp/before /tmp/after

Each scenario runs as `python -m scalesim run FILE --json` in a fresh process from the
repository root (serving scenarios as `serve FILE --json`), so no cache survives from one
to the next; the stdout and the exit code are kept per file. `--compare` lists every file
whose output is not byte-identical and exits 1 if there is one. Issue 18 asks for this check.

Scenarios of validation cases marked `skip:` (too slow to simulate yet) are left out, and a
run that takes longer than --timeout seconds is recorded as such; `--keep` reuses outputs
already in the folder (to finish an interrupted --write).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess

import yaml
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("scenarios", "validation/scenarios")


def skipped_scenarios() -> set[Path]:
    """Scenarios of validation cases that validate skips (too slow to simulate yet)."""
    skipped = set()
    for path in (ROOT / "validation" / "cases").glob("*.yaml"):
        for case in (yaml.safe_load(path.read_text()) or {}).get("cases", []):
            if case.get("skip") and case.get("scenario"):
                skipped.add(Path("validation") / case["scenario"])
    return skipped


def scenario_files(only: str | None = None) -> list[Path]:
    files = sorted(p.relative_to(ROOT) for folder in FOLDERS for p in (ROOT / folder).rglob("*.yaml"))
    skipped = skipped_scenarios()
    return [f for f in files if (only is None or str(f).startswith(only)) and f not in skipped]


def command_for(path: Path) -> list[str]:
    text = (ROOT / path).read_text()
    serving = any(line.startswith(("serving:", "requests:")) for line in text.splitlines())
    if serving:
        return [sys.executable, "-m", "scalesim", "serve", str(path), "--json"]
    # --max-seconds: steps beyond run's default ~10 s answer time (the large validation plans)
    # are simulated, not refused; the wall-clock bound is --timeout's.
    return [sys.executable, "-m", "scalesim", "run", str(path), "--json", "--max-seconds", "86400"]


def output_of(path: Path, timeout_s: float) -> str:
    try:
        done = subprocess.run(command_for(path), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"})
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout_s:g} s\n"
    return f"exit {done.returncode}\n{done.stdout}"


def name_of(path: Path) -> str:
    return str(path).replace("/", "__")


def write(directory: Path, workers: int, only: str | None, timeout_s: float, keep: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    files = [f for f in scenario_files(only) if not (keep and (directory / name_of(f)).exists())]
    with ThreadPoolExecutor(workers) as pool:
        outputs = pool.map(lambda path: output_of(path, timeout_s), files)
        for done, (path, text) in enumerate(zip(files, outputs), 1):
            (directory / name_of(path)).write_text(text)
            digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            print(f"[{done}/{len(files)}] {path} {text.splitlines()[0]} {digest}", flush=True)


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = [n for n in names if not (before / n).exists() or not (after / n).exists()
              or (before / n).read_bytes() != (after / n).read_bytes()]
    for name in differ:
        print(f"differs: {name.replace('__', '/')}")
    print(f"{len(names) - len(differ)} of {len(names)} outputs byte-identical")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="run every scenario and keep its output in this folder")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", help="only scenario paths starting with this text (e.g. scenarios/)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one scenario may take [300]")
    parser.add_argument("--keep", action="store_true", help="reuse outputs already in the --write folder")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.write is None:
        parser.error("give --write DIR or --compare BEFORE AFTER")
    write(args.write, args.workers, args.only, args.timeout, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
