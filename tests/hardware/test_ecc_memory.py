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


# nvidia-smi's memory.total at each card's DEFAULT ECC setting (ECC on for data-center boards, off for
# workstation boards), from published nvidia-smi captures; sources in each catalog entry's notes.
NVIDIA_SMI_TOTAL_MIB = {
    "l4": 23034,              # ECC on (GCP g2 / AWS g6 captures)
    "l40s": 46068,            # ECC on (MLPerf Training v4.0 system files)
    "l40": 46068,             # ECC on (same board; the A40 prints the same)
    "rtx6000-ada": 49140,     # ECC off, the workstation default
    "rtx-pro-6000": 97887,    # ECC on or off alike (GDDR7)
    "a100-40gb-pcie": 40536,  # ECC on, HBM2 side-band
    "a100-80gb-pcie": 81920,  # ECC on, HBM2e side-band
    "h100-pcie": 81559,       # ECC on, HBM2e side-band (Hyperstack capture)
}


@pytest.mark.parametrize("name", sorted(NVIDIA_SMI_TOTAL_MIB))
def test_memory_is_what_nvidia_smi_shows_at_the_default_ecc_setting_up_to_a_driver_reserve(name):
    # Where ECC takes capacity (GDDR6 in-line check bits, 1/16) the entry must not state the physical
    # size of a card that ships with ECC on; where it does not (HBM side-band, GDDR7) or ECC ships off,
    # the physical size is kept and nvidia-smi is at most a ~1% driver reserve below it.
    smi = NVIDIA_SMI_TOTAL_MIB[name] * MIB
    memory = get_gpu(name).memory_bytes
    assert smi <= memory <= smi * 1.011



def test_amd_hbm_capacities_are_binary_as_rocm_lists_them():
    # AMD's ROCm GPU-specifications table gives VRAM in GiB: MI300X 192, MI355X 288 (8 HBM3e stacks of
    # 36 GiB). AMD's marketed '192 GB' and '288 GB' are the same binary sizes, so MI355X holds exactly
    # 1.5x MI300X; a decimal 288 GB would hold 1.40x.
    mi300x, mi355x = get_gpu("mi300x"), get_gpu("mi355x")
    assert mi300x.memory_bytes == 192 * GIB
    assert mi355x.memory_bytes == pytest.approx(1.5 * mi300x.memory_bytes, rel=1e-9)
