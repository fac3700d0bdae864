"""Max-min rates kept by shape (fairshare.shape): the same collective on the next pipeline stage's GPUs
crosses other links in the same pattern, and gets the rates filling would give it, to the bit."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scalesim import fairshare
from scalesim.fairshare import ARRAYS_FROM, _with_private_links, filling_arrays, filling_heap, max_min_rates

INF = float("inf")


def _all_to_all(first_link: int) -> list[tuple[int, ...]]:
    """64 ranks, an up- and a down-link each, numbered from `first_link`."""
    return [(first_link + a, first_link + 64 + b) for a in range(64) for b in range(64) if a != b]


def _capacities(copies: int) -> list[float]:
    """Each copy's 128 links: ranks 0-7 at half width, so the rates differ across flows."""
    return [50.0 if r % 64 < 8 else 100.0 for _ in range(copies) for r in range(128)]


def test_a_copy_on_other_links_reuses_the_rates_and_they_are_its_own(monkeypatch):
    capacity = _capacities(2)
    fills = []
    original = fairshare.filling_arrays
    monkeypatch.setattr(fairshare, "filling_arrays", lambda *a: fills.append(1) or original(*a))
    memo = {}
    first = max_min_rates(_all_to_all(0), capacity, memo=memo)
    second = max_min_rates(_all_to_all(128), capacity, memo=memo)
    assert len(fills) == 1
    assert second == max_min_rates(_all_to_all(128), capacity)
    assert len(set(first)) > 1                       # not a case any rates would pass


def test_other_capacities_or_caps_are_another_shape():
    capacity = _capacities(2)
    capacity[128] = 25.0                             # the copy's rank 0 up-link narrower still
    memo = {}
    first = max_min_rates(_all_to_all(0), capacity, memo=memo)
    second = max_min_rates(_all_to_all(128), capacity, memo=memo)
    assert second == max_min_rates(_all_to_all(128), capacity)
    assert second != first
    caps = [0.5] + [INF] * (len(_all_to_all(0)) - 1)
    capped = max_min_rates(_all_to_all(0), _capacities(2), caps, memo=memo)
    assert capped[0] == 0.5 and capped != first                # below its fair share: held by the cap


def test_links_in_another_order_are_another_shape():
    """Ties are broken by link id: the shape keeps the order of the ids, not only who shares with whom."""
    flows = _all_to_all(0)
    moved = [((a + 64) % 128, (b + 64) % 128) for a, b in flows]      # up- and down-link ids exchanged
    capacity = _capacities(1)
    moved_capacity = capacity[64:] + capacity[:64]
    assert fairshare.shape(flows, capacity, {}) != fairshare.shape(moved, moved_capacity, {})


relabelled = st.integers(2, 8).flatmap(lambda n_links: st.tuples(
    st.lists(st.sampled_from([1.0, 2.0, 3.0, 7.5]), min_size=n_links, max_size=n_links),   # ties on purpose
    st.lists(st.lists(st.integers(0, n_links - 1), max_size=4).map(tuple), min_size=1, max_size=30),
    st.none() | st.lists(st.sampled_from([INF, 1.5, 2.0]), min_size=30, max_size=30),
    st.integers(1, 5), st.integers(0, 40),
))


@given(relabelled)
@settings(max_examples=200, deadline=None)
def test_both_fillings_see_link_ids_only_through_their_order(net):
    """What `shape` rests on: links renumbered in the same order (id -> step * id + offset), with their
    capacities, get the same rates to the bit from either filling."""
    capacity, flows, caps, step, offset = net
    moved = [tuple(step * link + offset for link in f) for f in flows]
    spread = [0.5] * (step * len(capacity) + offset)
    for link, c in enumerate(capacity):
        spread[step * link + offset] = c
    caps = caps[:len(flows)] if caps else None
    links, private = _with_private_links(flows, caps)
    moved_links, moved_private = _with_private_links(moved, caps)
    assert fairshare.shape(links, capacity, private) == fairshare.shape(moved_links, spread, moved_private)
    assert filling_heap(links, capacity, private) == filling_heap(moved_links, spread, moved_private)
    assert filling_arrays(links, capacity, private) == filling_arrays(moved_links, spread, moved_private)


def test_small_sets_are_filled_without_a_shape(monkeypatch):
    """Below ARRAYS_FROM crossings the heap costs less than working out the shape."""
    shapes = []
    monkeypatch.setattr(fairshare, "shape", lambda *a: shapes.append(1))
    flows = [(0, 1), (1, 2)]
    assert 2 * len(flows) < ARRAYS_FROM
    assert max_min_rates(flows, [1.0, 2.0, 3.0], memo={}) == [1.0, 1.0]
    assert shapes == []
