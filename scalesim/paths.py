"""Where the data that ships beside the package lives (topologies/, validation/).

In a checkout (and an editable install) it is the repository's own directory;
a wheel carries a copy under scalesim/_bundled/.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for candidate in (PACKAGE.parent / name, PACKAGE / "_bundled" / name):
        if candidate.is_dir():
            return candidate
    raise RuntimeError(f"scalesim was installed without its {name}/ directory")
