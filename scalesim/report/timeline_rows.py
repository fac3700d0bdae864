"""What the timeline plot draws, worked out on arrays: a step's intervals as columns, the ranks that
are drawn once for several identical ones, and the bars of each row and colour.

A 1,024-GPU step has a quarter of a million intervals; each is read once here (into numpy
columns) instead of once per question asked of it. The answers are the ones a walk over the
intervals in their order gives: the same ranks, rows, bars in the same order, the same floats.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scalesim.timeline import Columns, columns  # noqa: F401 -- made beside the timeline (result.py reads them too)


def rows_of(cols: Columns, shown: set[int], row_name: Callable[[str], str]) -> list[tuple[int, str]]:
    """The (rank, row name) pairs of the shown ranks, sorted."""
    pairs = np.unique(cols.rank * len(cols.streams) + cols.stream) if len(cols.rank) else np.empty(0, np.int64)
    ranks, streams = np.divmod(pairs, max(len(cols.streams), 1))
    return sorted({(r, row_name(cols.streams[s])) for r, s in zip(ranks.tolist(), streams.tolist()) if r in shown})


def identical_ranks(cols: Columns, ranks: list[int], row_name: Callable[[str], str]
                    ) -> tuple[set[int], dict[int, str]]:
    """Ranks whose every interval is the same drawn once: the first of each group, named with how
    many GPUs it stands for ('GPU 0 (x8, identical)'). Ranks can only be identical when they have
    as many intervals, starting and ending at the same times, so only those are compared in full."""
    where = {r: np.flatnonzero(cols.rank == r) for r in ranks}
    alike: dict[tuple, list[int]] = {}
    for r in ranks:
        at = where[r]
        first = float(cols.start_s[at].min()) if len(at) else float("inf")
        last = float(cols.end_s[at].max()) if len(at) else float("-inf")
        alike.setdefault((len(at), round(first, 12), round(last, 12)), []).append(r)
    signature: dict[int, tuple] = {}
    for same in alike.values():
        if len(same) > 1:
            for r in same:
                at = where[r].tolist()
                signature[r] = tuple(sorted(zip([row_name(cols.streams[s]) for s in cols.stream[at].tolist()],
                                                [cols.kinds[k] for k in cols.kind[at].tolist()],
                                                [round(x, 12) for x in cols.start_s[at].tolist()],
                                                [round(x, 12) for x in cols.end_s[at].tolist()])))
    groups: dict[tuple, list[int]] = {}
    for r in ranks:
        groups.setdefault(signature[r] if r in signature else ("alone", r), []).append(r)
    names = {}
    for members in groups.values():
        names[members[0]] = f"GPU {members[0]}" + (f" (x{len(members)}, identical)" if len(members) > 1 else "")
    return set(names), names


def bar_spans(cols: Columns, shown: set[int], row_of: Callable[[int, str], int], colour_of: dict[str, str],
              gpu_work: tuple[str, ...], waiting: str, fallback: str
              ) -> tuple[dict[tuple[int, str], tuple[np.ndarray, np.ndarray]], set[str]]:
    """Per (row, colour), in the order first drawn: the starts and ends (s) of its bars, in the
    timeline's order; and the kinds of work drawn (a kind without a colour is drawn as `fallback`).
    A host-bound kernel (a kind of `gpu_work` that started after it was ready) adds a bar of kind
    `waiting` from ready to start, after its own."""
    count = max(len(cols.streams), 1)
    pair = cols.rank * count + cols.stream                   # (rank, stream) as one number
    on = np.isin(cols.rank, sorted(shown))
    drawn = [k if k in colour_of else fallback for k in cols.kinds]
    palette = sorted({colour_of[k] for k in drawn} | {colour_of[waiting]})
    kind_colour = np.array([palette.index(colour_of[k]) for k in drawn] or [0], dtype=np.int64)
    row = np.zeros(int(pair.max()) + 1 if len(pair) else 1, dtype=np.int64)
    for p in np.unique(pair[on]).tolist():
        rank, stream = divmod(p, count)
        row[p] = row_of(rank, cols.streams[stream])
    bars = np.flatnonzero(on & (cols.end_s > cols.start_s))
    host_bound = np.isin(cols.kind, [code for code, k in enumerate(cols.kinds) if k in gpu_work])
    waits = np.flatnonzero(on & (cols.start_s > cols.ready_s) & host_bound)
    keys = np.concatenate((row[pair[bars]] * len(palette) + kind_colour[cols.kind[bars]],
                           row[pair[waits]] * len(palette) + palette.index(colour_of[waiting])))
    order = np.concatenate((2 * bars, 2 * waits + 1))        # a task's bar, then its waiting stretch
    lo = np.concatenate((cols.start_s[bars], cols.ready_s[waits]))
    hi = np.concatenate((cols.end_s[bars], cols.start_s[waits]))
    sort = np.lexsort((order, keys))
    keys, order, lo, hi = keys[sort], order[sort], lo[sort], hi[sort]
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.empty(0, np.int64)
    bounds = np.r_[first, len(keys)].tolist()
    spans = {}
    for g in sorted(range(len(first)), key=lambda g: order[first[g]]):        # in the order first drawn
        y, c = divmod(int(keys[first[g]]), len(palette))
        spans[(y, palette[c])] = (lo[bounds[g]:bounds[g + 1]], hi[bounds[g]:bounds[g + 1]])
    used = {drawn[k] for k in np.unique(cols.kind[bars]).tolist()}
    if len(waits):
        used.add(waiting)
    return spans, used
