"""Limits lab, round trip: one value through every format (stored value, code, error, class)."""

from __future__ import annotations

import math

from precisionlab.formats import FloatFormat
from precisionlab.results import Part, Scalar, Table
from precisionlab.rounding import encode, round_to

FTZ_NOTE = ("Flush-to-zero: CUDA's -ftz=true (implied by --use_fast_math) flushes fp32 subnormals to zero, HIP's "
            "-fgpu-flush-denormals-to-zero does the same on AMD, and x86 sets MXCSR FTZ/DAZ under -ffast-math. "
            "numpy runs with them off, so every value here is IEEE gradual underflow; 'with FTZ' is what a "
            "flushing kernel would keep.")


def _value_class(value: float, stored: float, fmt: FloatFormat) -> str:
    if math.isnan(stored):
        return "nan (overflow)" if abs(value) > fmt.max_finite else "nan (not representable)"
    if math.isinf(stored):
        return "inf (overflow)"
    if stored == 0:
        return "zero" if value == 0 else "zero (underflow)"
    if abs(stored) < fmt.min_normal:
        return "subnormal"
    return "normal"


def round_trip_section(value: float, formats: list[FloatFormat]) -> Part:
    findings: dict[str, Scalar] = {}
    rows: list[list[Scalar]] = []
    for fmt in formats:
        stored = float(round_to(value, fmt, nan="zero"))
        code = int(encode(value, fmt, nan="zero"))
        width = (fmt.bits + 3) // 4
        finite = math.isfinite(stored)
        abs_err = abs(stored - value) if finite else math.inf
        rel_err = abs_err / abs(value) if value != 0 and finite else (0.0 if finite else math.inf)
        kind = "saturated (overflow)" if finite and abs(value) > fmt.max_finite else _value_class(value, stored, fmt)
        ftz = math.copysign(0.0, stored) if kind == "subnormal" else stored
        rows.append([fmt.name, stored, f"0x{code:0{width}x}", abs_err, rel_err, kind, ftz])
        findings[f"round_trip_relative_error.{fmt.name}"] = rel_err
    table = Table(
        key="round_trip",
        title=f"Round trip of {value!r} through every format (nearest-even, each format's overflow policy)",
        columns=["format", "stored", "code", "abs error", "rel error", "class", "with FTZ"],
        rows=rows,
        note=("The stored value is the nearest member; rel error <= ulp/2 / |x| = 2^-(M+1) for normal values. "
              + FTZ_NOTE),
        formats={"stored": ".10g", "abs error": ".3g", "rel error": ".3g", "with FTZ": ".10g"},
    )
    return Part([table], findings=findings)
