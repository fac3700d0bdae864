"""The one error type for mistakes a user can make in what they write.

It carries where the mistake is (file and key path) so the CLI can print one
clear line and exit 2 instead of a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(Exception):
    """A user-supplied input is wrong; `str()` is the full message."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.key:
            where.append(f"{'option' if self.key.startswith('--') else 'key'} '{self.key}'")   # as typed
        prefix = ": ".join(where)
        return f"{prefix}: {self.detail}" if prefix else self.detail

    def located(self, *, file: str | None = None, key_prefix: str | None = None) -> "InputError":
        """Return a copy placed in a file and/or under a key prefix."""
        key = self.key
        if key_prefix:
            key = f"{key_prefix}.{key}" if key else key_prefix
        return self._copy(file=file or self.file, key=key)

    def with_detail(self, detail: str) -> "InputError":
        """A copy saying `detail` instead, in the same place."""
        return self._copy(detail=detail)

    def _copy(self, **fields) -> "InputError":
        copy = type(self).__new__(type(self))          # the same kind of error (and its extra fields)
        copy.__dict__.update(self.__dict__, **fields)
        Exception.__init__(copy, copy._render())
        return copy


# What an unknown key's error lists the keys one may write after (schema.input_error): a list, not a cause
# (scenario/frameworks.blame_preset reads the message before it).
ALLOWED_KEYS = " Allowed here: "


def did_you_mean(name: str, allowed: Iterable[str]) -> str:
    """" Did you mean 'x'?" naming the one of `allowed` closest to `name` (difflib), or "" when none is close.
    Case does not count in the comparison (`ALL_REDUCE` finds all_reduce); the hint spells the name as allowed.

    >>> did_you_mean("allreduce", ["all_reduce", "reduce", "all_gather"]), did_you_mean("zzz", ["ring"])
    (" Did you mean 'all_reduce'?", '')
    >>> did_you_mean("ALL_REDUCE", ["all_reduce", "reduce"])
    " Did you mean 'all_reduce'?"
    """
    spelled: dict[str, str] = {}
    for option in map(str, allowed):
        spelled.setdefault(option.lower(), option)     # the first spelling when two differ only in case
    close = difflib.get_close_matches(str(name).lower(), list(spelled), n=1, cutoff=0.5)
    return f" Did you mean '{spelled[close[0]]}'?" if close else ""


def unknown_name(kind: str, name: str, allowed: Iterable[str], *, key: str | None = None,
                 file: str | None = None, also: str = "") -> InputError:
    """An InputError for an unknown catalog name, suggesting the closest one (`also`: what else
    the key takes, appended to the names allowed)."""
    allowed = sorted(allowed)
    hint = did_you_mean(name, allowed)
    return InputError(f"unknown {kind} '{name}'.{hint} Allowed: {', '.join(allowed)}{also}",
                      key=key, file=file)
