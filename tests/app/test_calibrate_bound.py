"""`scalesim calibrate` fits the link that bounds the captured runs: the one whose efficiency the
simulated busbw follows. A named link that does not bound them is not fitted (it could only sink to
where it starts to bound, slowing every other transfer over it); calibrate says so and names the link."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scalesim.app.calibrate import (bandwidth_bound, busbw_of, calibrate, design_for_log, link_responses,
                                    log_topology)
from scalesim.app.measurements import read_measurements
from scalesim.cli import main
from scalesim.hardware.user_catalog import builtin_catalog

DATA = Path(__file__).parents[1] / "data"
NVLS_H100 = DATA / "nccl-tests-h100-issue290.txt"        # 8x H100 all_reduce on NVLink SHARP (real)
RING_H100 = DATA / "nccl-tests-sample.txt"               # 8x H100 all_gather, a ring (synthetic)


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def responses(path: Path) -> dict[str, float]:
    catalog = builtin_catalog()
    logs = read_measurements([path], None)[0]
    designs = [design_for_log(log, None, catalog) for log in logs]

    def topologies(cat):
        return [log_topology(log, d, None, cat) for log, d in zip(logs, designs)]
    return link_responses(busbw_of(logs, topologies), catalog, topologies(catalog), bandwidth_bound(logs))


def test_a_ring_follows_the_nvlink_port_and_nvls_the_switch_that_reduces():
    # Ring all-gather: every byte crosses the GPU's NVLink port at its capacity. NVLS all-reduce: the
    # switch's reduction caps each flow below the port's capacity (nvswitch-gen3 0.686 < nvlink4 0.82).
    ring, nvls = responses(RING_H100), responses(NVLS_H100)
    assert ring["nvlink4"] == pytest.approx(1.0, abs=0.05) and ring["nvswitch-gen3"] == pytest.approx(0.0, abs=1e-6)
    assert nvls["nvswitch-gen3"] == pytest.approx(1.0, abs=0.05) and nvls["nvlink4"] == pytest.approx(0.0, abs=1e-6)
    for name in ("pcie-gen5", "ib-ndr"):                 # not on either collective's path inside one node
        assert ring[name] == pytest.approx(0.0, abs=1e-6) and nvls[name] == pytest.approx(0.0, abs=1e-6)


def test_the_issue_command_on_an_nvls_capture_fits_the_switch_and_leaves_nvlink_transfers_alone(tmp_path):
    out = tmp_path / "mine"
    result = invoke("calibrate", NVLS_H100, "--link", "nvlink4", "--out", out)
    assert result.exit_code == 0, result.output
    said = result.output.splitlines()[0]
    assert "nvlink4 does not bound" in said and "nvswitch-gen3" in said
    entries = yaml.safe_load((out / "links.yaml").read_text())
    assert "nvlink4" not in entries and "nvswitch-gen3" in entries
    assert "in place of the --link named" in entries["nvswitch-gen3"]["notes"][0]
    # A ring over NVLink (an all-gather of 1 GiB) runs as fast with the folder as without it.
    ring = ["collective", "--topology", "dgx-h100", "--op", "all_gather", "--sizes", "1G", "--json"]
    before, after = (json.loads(invoke(*ring, *extra).output)[0]["busbw_GBps"] for extra in ([], ["--catalog", out]))
    assert after == before


def test_without_link_the_bounding_link_is_fitted_and_a_bounding_named_link_is_kept(tmp_path):
    fits = calibrate([NVLS_H100], out=tmp_path / "a")
    assert fits[0].entry == "nvswitch-gen3" and not fits[0].notice
    fits = calibrate([RING_H100], out=tmp_path / "b", link="nvlink4")
    assert fits[0].entry == "nvlink4" and not fits[0].notice


def test_a_link_off_the_path_is_refused_naming_the_link_that_bounds_the_runs(tmp_path):
    result = invoke("calibrate", RING_H100, "--link", "nvswitch-gen3", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "--link nvlink4" in result.output
