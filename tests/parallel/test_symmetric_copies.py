"""`Placement.symmetric_copies` (found by stride arithmetic) against its definition on coordinates."""

import itertools

from scalesim.parallel.placement import DIMS, Placement


def _by_definition(pl: Placement, group: tuple[int, ...], span: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Every combination of the dimensions outside `span` (but pp), the last varying fastest, set on
    each rank's coordinates; the group's own combination left out."""
    vary = [d for d in ("tp", "cp", "dp") if d not in span]
    sizes = {"tp": pl.tp, "cp": pl.cp, "dp": pl.dp}
    base = pl.coords(group[0])
    out = []
    for combo in itertools.product(*(range(sizes[d]) for d in vary)):
        if all(i == base[d] for d, i in zip(vary, combo)):
            continue
        out.append(tuple(pl.rank(**{**pl.coords(r), **dict(zip(vary, combo))}) for r in group))
    return out


def test_copies_are_the_groups_with_the_other_coordinates_changed():
    for order in itertools.permutations(DIMS):
        for tp, cp, dp, pp in itertools.product((1, 3), (1, 2), (1, 4), (1, 2)):
            pl = Placement(tp, cp, dp, pp, order)
            for rank in range(pl.size):
                coords = pl.coords(rank)
                groups = [(pl.group(d, coords), span) for d in DIMS for span in ((d,), ("tp",), ("dp", "cp"), ())]
                groups.append((pl.grad_group(coords), ("dp", "cp")))
                groups.append(((rank, (rank + 1) % pl.size), ("dp",)))      # ranks apart in the varied dimensions
                for group, span in groups:
                    assert pl.symmetric_copies(group, span) == _by_definition(pl, group, span)
