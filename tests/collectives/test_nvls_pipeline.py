"""NVLS's pipeline fill: why mid-size NVLS all-reduces run well below their plateau (collectives/nvls.py)."""

from dataclasses import replace

import pytest

from scalesim.app.collective_bench import time_collective
from scalesim.collectives import plan_collective, plan_time_s
from scalesim.collectives.nvls import nvls_chunk_bytes, pipeline_fill_s
from scalesim.errors import InputError
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.topology import build_cluster, load_node_design

MiB, KiB = 2**20, 2**10


def h100(fill: float | None = None, design: str = "dgx-h100"):
    catalog = builtin_catalog()
    if fill is not None:
        catalog = catalog.with_spec(replace(catalog.link("nvswitch-gen3"), nvls_pipeline_fill=fill), "test")
    return build_cluster(load_node_design(design), catalog=catalog)


@pytest.mark.parametrize("size, chunk", [
    (1 * MiB, 16 * KiB), (8 * MiB - 1, 16 * KiB), (8 * MiB, 32 * KiB),     # NCCL src/enqueue.cc (2.18.5-2.21.5),
    (64 * MiB - 1, 32 * KiB), (64 * MiB, 64 * KiB),                         # 16 channels x 8 heads: below 2, 8
    (1024 * MiB - 1, 64 * KiB), (1024 * MiB, 128 * KiB), (8192 * MiB, 128 * KiB)])   # and 64 x 128 x chunk
def test_the_chunk_follows_nccls_thresholds(size, chunk):
    assert nvls_chunk_bytes(size, heads=8) == chunk


def test_the_fill_is_a_few_loops_at_the_port_rate():
    # 2 loops of 16 x 8 x 64 KiB (8 MiB), 9/8 of it through a 300 GB/s port: 2 x 8 MiB x 1.125 / 300 GB/s.
    assert pipeline_fill_s(128 * MiB, 8, 300e9, 2.0) == pytest.approx(2 * 8 * MiB * 1.125 / 300e9)
    # Less than a loop of data: only the loop's share that exists fills the pipe.
    assert pipeline_fill_s(1 * MiB, 8, 300e9, 2.0) == pytest.approx(2 * 1 * MiB * 1.125 / 300e9)
    assert pipeline_fill_s(128 * MiB, 8, 300e9, 0.0) == 0.0


def test_a_deeper_fill_never_makes_a_call_faster():
    for size in (1 * MiB, 16 * MiB, 128 * MiB, 1024 * MiB):
        times = [plan_time_s(plan_collective("all_reduce", t, tuple(range(8)), size, "nvls"), t.capacity_bytes_per_s)
                 for t in (h100(0.0), h100(1.0), h100(4.0))]
        assert times == sorted(times) and times[0] < times[-1]


def test_nvls_bus_bandwidth_never_falls_as_the_message_doubles():
    topology = h100()
    busbw = [time_collective(topology, "all_reduce", 8, 2**k, "nvls").busbw_GBps for k in range(20, 34)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(busbw[1:], busbw)), busbw


@pytest.mark.parametrize("design, size, measured", [
    # Azure/AI-benchmarking-guide ND_H100_v5_results.md and ND_H200_v5_results.md @8fd0c6e (NVLS, NCCL 2.18.5 /
    # 2.20.5); before the fill the H200 rows were +34% and +10%.
    ("dgx-h100", 16 * MiB, 234.4), ("dgx-h100", 128 * MiB, 400.6),
    ("hgx-h200", 16 * MiB, 240.41), ("hgx-h200", 128 * MiB, 412.45),
    # nccl-tests#290, a real 8x H100 capture (tests/data/nccl-tests-h100-issue290.txt): +18%, +13%, +9.5% before.
    ("dgx-h100", 128 * MiB, 382.99), ("dgx-h100", 256 * MiB, 412.35), ("dgx-h100", 512 * MiB, 431.81),
])
def test_mid_size_nvls_figures_are_within_7_percent_with_nothing_fitted(design, size, measured):
    # The fill is the NVLS kernel's three-stage pipeline (two loops, links.yaml), fitted on none of these:
    # Azure's pages -2..+3%, the capture +6..+7% (its own fit would be 3.94 loops).
    busbw = time_collective(h100(design=design), "all_reduce", 8, size, "nvls").busbw_GBps
    assert busbw == pytest.approx(measured, rel=0.07)


def test_only_an_nvls_switch_takes_a_pipeline_fill():
    catalog = builtin_catalog()
    assert catalog.resolve_link({"base": "nvswitch-gen3", "nvls_pipeline_fill": 3}).nvls_pipeline_fill == 3
    with pytest.raises(InputError, match="nvls_pipeline_fill"):
        catalog.resolve_link({"base": "nvlink4", "nvls_pipeline_fill": 3})


def test_auto_chooses_as_nccls_tuner_which_does_not_see_the_fill():
    # NCCL's tuner times NVLS as latency + size / bandwidth (src/graph/tuning.cc), without the fill, so the
    # fill may slow an NVLS call but never changes which algorithm and protocol `auto` picks.
    shipped, unfilled = h100(), h100(0.0)
    for size in (2**k for k in range(20, 31)):
        with_fill = plan_collective("all_reduce", shipped, tuple(range(8)), size)
        without = plan_collective("all_reduce", unfilled, tuple(range(8)), size)
        assert (with_fill.algo, with_fill.protocol) == (without.algo, without.protocol)
        assert plan_time_s(with_fill, shipped.capacity_bytes_per_s) >= plan_time_s(without, unfilled.capacity_bytes_per_s)
