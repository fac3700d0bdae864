"""Paths a command will write, checked before any simulation runs.

A bad --out, --trace, --report or --plot is reported at once, naming the
option (exit 2), instead of a traceback after minutes of simulation. The
checks create nothing: the directories are made when the files are written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from scalesim.errors import InputError


def _first_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists."""
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _check_creatable(directory: Path, option: str) -> None:
    """`directory` is a directory, or can be made: its closest existing ancestor is a writable directory."""
    existing = _first_existing(directory.absolute())
    if not existing.is_dir():
        raise InputError(f"cannot write into {directory}: {existing} is a file, not a directory", key=option)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write into {directory}: no permission to write in {existing}", key=option)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output_file(path: Path | None, option: str, *, suffixes: Iterable[str] = (),
                      inputs: Iterable[Path | str] = ()) -> None:
    """Refuse a file path the command could not write, or should not (an input file)."""
    if path is not None:
        _guarded(_check_file, Path(path), option, tuple(suffixes), tuple(inputs))


def check_output_dir(path: Path | None, option: str, files: Iterable[str] = ()) -> None:
    """Refuse a directory the command could not create or write into, or one where a file it writes
    (`files`) is already there and is not scalesim's (a file of the user's)."""
    if path is not None:
        _guarded(_check_creatable, Path(path), option)
        for name in files:
            _guarded(_check_own, Path(path) / name, option)


def _check_own(path: Path, option: str) -> None:
    if path.is_dir():
        raise InputError(f"{path} is a directory where scalesim writes a file; give another {option}", key=option)
    if path.is_file() and path.stat().st_size > 0 and not written_by_scalesim(path, earlier=True):
        raise InputError(f"{path} exists and scalesim did not write it; remove it or give another {option} "
                         "(scalesim overwrites only files it wrote)", key=option)


def _guarded(check, path: Path, option: str, *args) -> None:
    try:
        check(path, option, *args)
    except OSError as exc:          # a name too long, a loop of symbolic links, ...
        raise InputError(f"cannot use {path}: {exc.strerror or exc.__class__.__name__}", key=option) from None


# What scalesim puts in every file it writes at a path the user names (--trace, --report, --csv,
# --plot, topology show --out), so that a later run recognises the file as its own and may write it
# again; a file without it (the user's) is never overwritten.
PRODUCER = "scalesim"
HTML_GENERATOR = f"<meta name='generator' content='{PRODUCER}'>"
TRACE_GENERATOR = {"generator": PRODUCER}                       # the trace's first key: otherData
_MARKS = (
    b"tEXtSoftware\x00" + PRODUCER.encode(),            # PNG: savefig(metadata={"Software": ...})
    f"<dc:title>{PRODUCER}".encode(),                   # SVG: metadata={"Creator": ...}
    f"/Creator ({PRODUCER}".encode(),                   # PDF: the same
    b'{"otherData": {"generator": "' + PRODUCER.encode(),  # run --trace
    HTML_GENERATOR.encode(),                            # compare --report
    b"file,scenario,",                                  # compare --csv's header
)


def figure_metadata(path: Path) -> dict:
    """savefig's `metadata` naming scalesim as the file's producer, for the format of `path`."""
    suffix = Path(path).suffix.lower()
    return {"Software": PRODUCER} if suffix == ".png" else {"Creator": PRODUCER} if suffix in (".svg", ".pdf") else {}


# What the plots and tables in an --out folder held before they carried the mark: matplotlib's own
# PNG tag, the sweep's CSV header and JSON start (a re-run into plots/<name>/ writes them again).
_EARLIER_MARKS = (b"tEXtSoftware\x00Matplotlib", b"gpus,nodes,plan,", b'{\n  "scenario": ')


def written_by_scalesim(path: Path, earlier: bool = False) -> bool:
    """Whether the file at `path` carries scalesim's mark (in its first or last 64 KiB), whatever
    its name ends in (`--trace step.trace` is JSON all the same); `earlier`: or what an --out
    folder's files held before the mark."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
        handle.seek(max(0, path.stat().st_size - (1 << 16)))
        tail = handle.read()
    marks = _MARKS + (_EARLIER_MARKS if earlier else ())
    return any(mark in head or mark in tail for mark in marks)


def _check_file(path: Path, option: str, suffixes: tuple, inputs: tuple) -> None:
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(f"must be a {' or '.join(suffixes)} file, got {path.name!r}", key=option)
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a file name", key=option)
    for given in inputs:
        if _same_file(path, Path(given)):
            raise InputError(f"{path} is an input file of this command; writing it would overwrite it",
                             key=option)
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"no permission to overwrite {path}", key=option)
    if path.is_file() and path.stat().st_size > 0 and not written_by_scalesim(path):
        raise InputError(f"{path} exists and scalesim did not write it; remove it or give another name "
                         "(scalesim overwrites only files it wrote)", key=option)
    _check_creatable(path.parent, option)
