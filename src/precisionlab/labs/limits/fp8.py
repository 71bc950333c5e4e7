"""Limits lab, the two E4M3s: OCP against FNUZ, and every fp8 code cross-checked against ml_dtypes and torch."""

from __future__ import annotations

import numpy as np

from precisionlab.formats import get_format
from precisionlab.labs.formats_table import two_e4m3_table
from precisionlab.numerics.crosscheck import all_codes, vendor_mismatches
from precisionlab.results import Part, Scalar, Table

VENDOR_LIBRARIES = ("ml_dtypes", "torch")
"""The libraries the fp8 codes are cross-checked against (both optional)."""


def fp8_trap_section() -> Part:
    """The two-E4M3 table (shared with the advisor, see formats_table.two_e4m3_table) and its findings."""
    decoded = {name: all_codes(name) for name in ("e4m3", "e4m3fnuz")}
    ocp, fnuz = get_format("e4m3"), get_format("e4m3fnuz")
    findings: dict[str, Scalar] = {
        "fnuz_vs_ocp.decode_ratio": float(decoded["e4m3"][0x40] / decoded["e4m3fnuz"][0x40]),
        "fnuz_vs_ocp.max_e4m3": ocp.max_finite,
        "fnuz_vs_ocp.max_e4m3fnuz": fnuz.max_finite,
        "fnuz_vs_ocp.code_0x80_e4m3": float(decoded["e4m3"][0x80]),
        "fnuz_vs_ocp.code_0x80_e4m3fnuz": float(decoded["e4m3fnuz"][0x80]),
    }
    return Part([two_e4m3_table()], findings=findings)


def fp8_crosscheck_section() -> Part:
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    total = 0
    checked: set[str] = set()
    for name in ("e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz"):
        fmt = get_format(name)
        values = all_codes(name)
        result = vendor_mismatches(name)
        cells: list[Scalar] = []
        for library in VENDOR_LIBRARIES:
            count = result[library]
            if count is None:
                cells.append("skipped: not installed")
            else:
                cells.append(count)
                total += count
                checked.add(library)
        rows.append([name, fmt.code_count, int(np.isnan(values).sum()), fmt.has_negative_zero, fmt.max_finite,
                     *cells])
    findings["vendor_crosscheck.mismatches"] = total if checked else "skipped: not installed"
    findings["vendor_crosscheck.libraries"] = ", ".join(sorted(checked)) if checked else "none"
    table = Table(
        key="fp8_crosscheck",
        title="All 256 codes decoded by precisionlab, cross-checked against ml_dtypes and torch",
        columns=["format", "codes", "NaN codes", "-0", "max finite", "ml_dtypes mismatches", "torch mismatches"],
        rows=rows,
        note=("A mismatch is a code whose decoded values differ bit for bit (signed zero included; NaN matches "
              "NaN). Expected 0. A library that is not installed is reported as skipped, never as a pass."),
        formats={"max finite": ".6g"},
    )
    return Part([table], findings=findings)
