"""A rank's repeated passes built once: the second and later (forward | backward, chunk) passes replayed.

A stage runs the same forward and backward of a chunk once per micro-batch: the same
compute and collectives, in the same order, with the same dependencies between them. Only
where they land in the rank's task list moves, and with it their dependencies, the
collectives' sequence numbers (each call key counts the calls of its group) and the
pipeline transfers' micro-batch. `PassTemplates` records a pass as `RankProgram` builds it
and replays it for the later micro-batches with those renumbered: the same tasks as
building them again (tests/parallel/test_pass_templates.py), at a fraction of the cost.

A pass is recorded only when it can be replayed exactly: its dependencies on earlier tasks are
the rank's last two layer computes (ZeRO-3's gather-ahead, offloaded weights' fetch-ahead) and it
gathers no layer for the first time (ZeRO-1/2 with overlap_param_gather) and leaves FSDP1's rate-limiter
queue as it found it (parallel/fsdp_limiter.py: its events name tasks of earlier passes). Offloaded weights'
fetches are renumbered like group calls (each rank counts its own). The final micro-batch's
backward (it launches the gradient reductions) is keyed apart.
"""

from __future__ import annotations

from dataclasses import fields

from scalesim.program import CollectiveTask, ComputeTask

_BEFORE = (-2, -1)          # dependency codes of the second-last and the last layer compute before the pass
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in (ComputeTask, CollectiveTask)}
_DEPS = {cls: names.index("deps") for cls, names in _FIELDS.items()}


class _Template:
    """One recorded pass: per task its field values and how to renumber them."""

    __slots__ = ("entries", "counters", "computes", "reductions", "overlapped")

    def __init__(self, entries, counters, computes, reductions, overlapped):
        self.entries = entries          # (type, its field values (a list: deps, name and key set on replay),
        #                                  where deps go, deps at code or offset, key, one dep, all within the pass)
        self.counters = counters        # counter -> calls this pass adds
        self.computes = computes        # offsets appended to layer_computes
        self.reductions = reductions    # offsets (or None) appended to reductions
        self.overlapped = overlapped    # offsets appended to overlapped


class PassTemplates:
    """Record-and-replay of one rank's passes (see the module docstring)."""

    def __init__(self, program):
        self.p = program
        self.known: dict[tuple, _Template | None] = {}
        self.replayed = 0               # passes replayed, not built

    def run(self, key: tuple, mb: int, build, later: int = 1) -> None:
        """The pass `key` of micro-batch `mb`: replayed when recorded, else built by `build()` (and
        recorded when `later` passes of the same key are still to come: recording costs more than
        building, so a pass that is not replayed is not recorded)."""
        p = self.p
        template = self.known.get(key)
        if template is not None and len(p.layer_computes) >= 2:
            self._replay(template, mb)
            self.replayed += 1
            return
        if later <= 0:
            build()
            return
        state = (len(p.list), list(p.layer_computes[-2:]), dict(p.counters), len(p.layer_computes),
                 len(p.reductions), len(p.overlapped), len(p.gathered_once), list(p.free_events))
        build()
        self.known[key] = self._record(state)

    def _record(self, state) -> _Template | None:
        p = self.p
        start, before, counters, computes, reductions, overlapped, gathered, freed = state
        if len(before) < 2 or len(p.gathered_once) != gathered or p.free_events != freed:
            return None
        entries = []
        for task in p.list[start:]:
            deps = []
            for d in task.deps:
                if d >= start:
                    deps.append(d - start)
                elif d in before:
                    deps.append(_BEFORE[before.index(d)])
                else:
                    return None
            cls = type(task)
            values = [getattr(task, name) for name in _FIELDS[cls]]
            key = None
            if isinstance(task, CollectiveTask):
                key = _key_of(task, counters)
                if key is None:
                    return None
            single = deps[0] if len(deps) == 1 and deps[0] >= 0 else None
            entries.append((cls, values, _DEPS[cls], tuple(deps), key, single, min(deps, default=0) >= 0))
        added = {c: n - counters.get(c, 0) for c, n in p.counters.items() if n != counters.get(c, 0)}
        return _Template(entries, added, [i - start for i in p.layer_computes[computes:]],
                         [None if i is None else i - start for i in p.reductions[reductions:]],
                         [i - start for i in p.overlapped[overlapped:]])

    def _replay(self, template: _Template, mb: int) -> None:
        p = self.p
        start = len(p.list)
        before = {-2: p.layer_computes[-2], -1: p.layer_computes[-1]}
        counters = p.counters
        append = p.list.append
        shift = start.__add__
        # Each entry's field values are a list of its own, updated in place and passed whole (a
        # fresh tuple per call): cheaper than joining the fields around the dependencies per task.
        for cls, values, d, deps, key, single, inside in template.entries:
            if single is not None:
                values[d] = (single + start,)
            elif inside:                # every dependency within the pass
                values[d] = tuple(map(shift, deps))
            else:
                values[d] = tuple(x + start if x >= 0 else before[x] for x in deps)
            if key is not None:
                if key[0] is None:      # 'pp {direction} mb{mb}', 'pp/{direction}/{pair}/{mb}/{chunk}'
                    values[0], values[1] = f"pp {key[1]} mb{mb}", f"pp/{key[1]}/{key[2]}/{mb}/{key[3]}"
                else:
                    values[0], values[1] = key[3], key[0] + str(key[2] + counters.get(key[1], 0))
            append(cls(*values))
        for counter, n in template.counters.items():
            counters[counter] = counters.get(counter, 0) + n
        p.layer_computes.extend(i + start for i in template.computes)
        p.reductions.extend(None if i is None else i + start for i in template.reductions)
        p.overlapped.extend(i + start for i in template.overlapped)


def _key_of(task: CollectiveTask, counters: dict) -> tuple | None:
    """How the call's key is renumbered: (None, direction, pair, chunk) for pipeline transfers
    ('pp/act/3->4/17/2': the micro-batch, 17, replaced),
    (prefix, counter, sequence number less the counter at the pass start, name) for group calls
    ('kind/first rank/seq', counted per (kind, first rank)) and offloaded weights' fetches
    ('offload/fetch/rank/seq', counted per ('fetch', rank): builder.py _fetch), None for anything else."""
    key = task.key
    if key.startswith("pp/"):
        _, direction, pair, _, chunk = key.split("/")
        return (None, direction, pair, chunk)
    parts = key.split("/")
    if len(parts) == 4 and key.startswith("offload/fetch/"):
        kind, prefix = "fetch", "offload/fetch/"
    elif len(parts) == 3:
        kind, prefix = parts[0], parts[0] + "/"
    else:
        return None
    first, seq = parts[-2:]
    if not first.isdigit() or not seq.isdigit():
        return None
    counter = (kind, int(first))
    return (f"{prefix}{first}/", counter, int(seq) - counters.get(counter, 0), task.name)
