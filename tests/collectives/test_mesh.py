"""Rings on a fully connected board use every link, as RCCL's own MI300X ring set does (rome_model_79)."""

from collections import Counter

import pytest

from scalesim.collectives.mesh import greedy_rings, mesh_rings


@pytest.mark.parametrize("n", range(2, 13))
def test_rings_are_hamiltonian_and_share_no_link(n):
    arcs = Counter()
    for ring in mesh_rings(n):
        assert sorted(ring) == list(range(n))
        arcs.update((ring[i], ring[(i + 1) % n]) for i in range(n))
    assert max(arcs.values()) == 1


def test_eight_gpus_use_all_seven_links_of_every_gpu_in_both_directions():
    rings = mesh_rings(8)
    used = {(r[i], r[(i + 1) % 8]) for r in rings for i in range(8)}
    assert len(rings) == 7 and len(used) == 8 * 7


@pytest.mark.parametrize("n", range(2, 13))
def test_never_fewer_rings_than_the_greedy_set(n):
    assert len(mesh_rings(n)) >= len(greedy_rings(n))
