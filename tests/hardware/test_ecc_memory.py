"""Memory a framework can use on GDDR6 parts whose ECC is on by default."""

from __future__ import annotations

import pytest

from scalesim.hardware import get_gpu

MIB = 2 ** 20
GIB = 2 ** 30


@pytest.mark.parametrize("name", ["l40s", "l40"])
def test_gddr6_ecc_parts_offer_fifteen_sixteenths_of_their_48_gib(name):
    # In-line GDDR6 ECC stores its check bits in the same DRAM: with ECC on (the default on these
    # data-center Ada boards, 'GDDR6 with ECC') 1/16 of the 24 x 16 Gbit = 48 GiB is not the
    # framework's. nvidia-smi reserves a further 12 MiB either way (49140 MiB with ECC off).
    spec = get_gpu(name)
    assert spec.ecc
    assert spec.memory_bytes == pytest.approx(48 * GIB * 15 / 16, abs=16 * MIB)
    assert spec.memory_bytes < 48 * GIB - 2 * GIB


def test_l40s_memory_is_what_its_mlperf_systems_report():
    # mlcommons/training_results_v4.0 @6fe9543: Dell R760xax4L40S.json and NVIDIA's l40s_* systems give
    # 'accelerator_memory_capacity': '46068 MiB' with 'GDDR6 with ECC'.
    assert get_gpu("l40s").memory_bytes == 46068 * MIB
