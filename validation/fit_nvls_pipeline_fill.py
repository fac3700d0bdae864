"""What a fit of NVSwitch gen 3's `nvls_pipeline_fill` gives (scalesim/hardware/data/links.yaml).

The catalog's value is no longer fitted (Dec 2026): it is the NVLS kernel's three-stage pipeline, 2 loops
(see links.yaml's notes). This script shows what a fit would give, as a check on that mechanism: 2.217 on
Azure's page, 3.94 on the nccl-tests#290 capture. It fits with `scalesim calibrate`'s own code (scalesim.app.calibrate.fit_link) on ONE source:
the nccl-tests all-reduce busbw of Azure's ND H100 v5 page (validation/cases/azure-ai-benchmarking-guide.yaml,
ids azure-nd-h100x8-allreduce-*), with the efficiency held at the catalog's (fitted on another source);
the other sources (the ND H200 v5 page, the real H100 capture tests/data/nccl-tests-h100-issue290.txt) are
left out and printed as out-of-sample checks.

    PYTHONPATH=. python validation/fit_nvls_pipeline_fill.py
"""

from __future__ import annotations

from scalesim.app.calibrate import FILL_RANGE, busbw_of, ramp_rows, solve_field, with_field
from scalesim.app.measurements import BusbwPoint, NcclTestsLog, read_measurements
from scalesim.app.validate import load_cases
from scalesim.hardware.user_catalog import builtin_catalog
from scalesim.topology import build_cluster, load_node_design
from pathlib import Path

LINK = "nvswitch-gen3"
PAGES = {"azure-nd-h100x8-allreduce-": ("dgx-h100", "NVIDIA H100 80GB HBM3"),
         "azure-nd-h200x8-allreduce-": ("hgx-h200", "NVIDIA H200")}


def page_log(prefix: str) -> tuple[NcclTestsLog, str]:
    design, device = PAGES[prefix]
    cases = [c for c in load_cases() if c.id.startswith(prefix)]
    points = tuple(sorted((BusbwPoint(_bytes(c.collective.size), c.measured) for c in cases),
                          key=lambda p: p.size_bytes))
    return NcclTestsLog(prefix, "all_reduce", ("vm",) * 8, device, points), design


def _bytes(text: str) -> float:
    from scalesim.units import parse_bytes
    return parse_bytes(text)


def main() -> None:
    catalog = builtin_catalog()
    spec = catalog.link(LINK)
    fit_log, design = page_log("azure-nd-h100x8-allreduce-")
    busbw = busbw_of([fit_log], lambda cat: [build_cluster(load_node_design(design), catalog=cat)], "nvls")
    fill = solve_field(busbw, catalog, LINK, "nvls_pipeline_fill", ramp_rows([fit_log]), FILL_RANGE, False)
    print(f"{LINK}.nvls_pipeline_fill fitted on the ND H100 v5 page: {fill:.3f} (catalog: {spec.nvls_pipeline_fill})")
    h200, h200_design = page_log("azure-nd-h200x8-allreduce-")
    (capture,), _, _ = read_measurements([Path("tests/data/nccl-tests-h100-issue290.txt")])
    other = solve_field(busbw_of([capture], lambda cat: [build_cluster(load_node_design("dgx-h100"), catalog=cat)]),
                        catalog, LINK, "nvls_pipeline_fill", ramp_rows([capture]), FILL_RANGE, False)
    print(f"  without that source (fitted the same way on the H100 capture, {capture.file}): {other:.3f}")
    for log, d, algo in ((fit_log, design, "nvls"), (h200, h200_design, "nvls"), (capture, "dgx-h100", "auto")):
        for f in (spec.nvls_pipeline_fill, 0.0):
            got = busbw_of([log], lambda cat, d=d: [build_cluster(load_node_design(d), catalog=cat)], algo)(
                with_field(catalog, LINK, nvls_pipeline_fill=f), [(log, p) for p in log.points])
            errs = " ".join(f"{p.size_bytes / 2**20:g}M {g / p.busbw_GBps - 1:+.1%}" for p, g in zip(log.points, got))
            print(f"  {log.file[:40]:40s} fill {f:5.2f}: {errs}")


if __name__ == "__main__":
    main()
