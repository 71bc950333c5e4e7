"""The formats lab: every format's limits derived from (E, M, bias, encoding), and code tables."""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np

from precisionlab.formats import FloatFormat, Format, IntFormat, format_names, get_format, list_formats, p3109_formats
from precisionlab.labs import Lab
from precisionlab.numerics.crosscheck import all_codes
from precisionlab.results import Figure, LabResult, Scalar, Series, Table
from precisionlab.rounding import decode

FORMAT_COLUMNS = [
    "format", "bits", "E", "M", "bias", "max finite", "min normal", "min subnormal", "ulp(1)",
    "digits", "binades", "inf", "NaN", "-0",
]


def format_row(fmt: Format) -> list[Scalar]:
    if isinstance(fmt, IntFormat):
        return [fmt.name, fmt.bits, None, None, None, float(fmt.max_value), None, None, 1.0,
                round(math.log10(fmt.max_value - fmt.min_value + 1), 2), None, False, False, False]
    bits: Scalar = fmt.bits if fmt.stored_bits is None else f"{fmt.stored_bits} ({fmt.bits} used)"
    return [fmt.name, bits, fmt.exp_bits, fmt.man_bits, fmt.bias, fmt.max_finite, fmt.min_normal,
            fmt.min_subnormal, fmt.eps, round(fmt.decimal_digits, 2), fmt.binades, fmt.has_inf, fmt.has_nan,
            fmt.has_negative_zero]


def format_table(formats: list[Format] | None = None) -> Table:
    chosen = formats if formats is not None else list_formats()
    return Table(
        key="formats",
        title="Number formats, every cell derived from (E, M, bias, encoding)",
        columns=FORMAT_COLUMNS,
        rows=[format_row(f) for f in chosen],
        note=("max finite = (2 - 2^-M)·2^emax (fn formats lose the all-ones code to NaN: 448 for e4m3; "
              "extended P3109 formats lose one more code to inf); "
              "min normal = 2^(1-bias); min subnormal = 2^(1-bias-M); ulp(1) = 2^-M; digits = (M+1)·log10 2. "
              "P3109 binary<K>p<P>: M = P-1, E = K-P (+1 unsigned), bias 2^(E-1), one NaN, one zero. "
              "Integers: signed range -2^(b-1)..2^(b-1)-1; symmetric quantization uses ±(2^(b-1)-1)."),
        formats={"max finite": ".5g", "min normal": ".5g", "min subnormal": ".5g", "ulp(1)": ".4g"},
    )


TRAP_CODES = (0x00, 0x01, 0x08, 0x38, 0x40, 0x77, 0x78, 0x7E, 0x7F, 0x80, 0xC0, 0xFE, 0xFF)
"""Codes whose meaning differs (or not) between the two E4M3s: zero, subnormals, 1, 2, the maxima, NaNs, -0."""


def two_e4m3_table() -> Table:
    """Selected codes decoded as OCP e4m3 and AMD FNUZ e4m3fnuz (and both E5M2s): the same bits, other values.

    One table for every lab that shows the trap (limits, advise), so the report prints it once."""
    names = ("e4m3", "e4m3fnuz", "e5m2", "e5m2fnuz")
    decoded = {name: all_codes(name) for name in names}
    rows: list[list[Scalar]] = []
    for code in TRAP_CODES:
        a, b = float(decoded["e4m3"][code]), float(decoded["e4m3fnuz"][code])
        ratio = a / b if math.isfinite(a) and math.isfinite(b) and b != 0 else None
        rows.append([f"0x{code:02x}", format(code, "08b"), a, b, ratio, float(decoded["e5m2"][code]),
                     float(decoded["e5m2fnuz"][code])])
    return Table(
        key="fp8_trap",
        title="The two E4M3s: the same bits under OCP (e4m3, bias 7) and AMD gfx942 FNUZ (e4m3fnuz, bias 8)",
        columns=["code", "bits", "e4m3", "e4m3fnuz", "ratio", "e5m2", "e5m2fnuz"],
        rows=rows,
        note=("The bias differs by one, so every normal code decodes a factor of two apart (0x40: 2.0 against "
              "1.0); 0x80 is -0 in OCP and the single NaN in FNUZ; 0x7f is NaN in e4m3 and 240 (the max) in "
              "e4m3fnuz, against OCP's max 448 at 0x7e. Bits written by one vendor's kernel and read by the "
              "other's are silently off by 2x: record which E4M3 a checkpoint holds (MI300X / gfx942 "
              "implements FNUZ; the OCP spec and NVIDIA's __nv_fp8_e4m3 are e4m3fn)."),
        formats={"e4m3": ".6g", "e4m3fnuz": ".6g", "e5m2": ".6g", "e5m2fnuz": ".6g", "ratio": ".3g"},
    )


def code_class(value: float, code: int, fmt: FloatFormat) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    if fmt.subnormals and (code >> fmt.man_bits) & fmt.top_exponent_field == 0:
        return "subnormal"
    return "normal"


def code_table(spec: str | Format) -> Table:
    """Every code of a format of at most 8 bits: code, bit fields, value, class (golden data)."""
    fmt = get_format(spec)
    if fmt.code_count > 256:
        raise ValueError(f"code tables are for formats of 8 bits or fewer; {fmt.name} has {fmt.bits}")
    codes = np.arange(fmt.code_count, dtype=np.uint16)
    values = np.asarray(decode(codes, fmt), dtype=np.float64)
    rows: list[list[Scalar]] = []
    for code, value in zip(codes.tolist(), values.tolist(), strict=True):
        bits = format(code, f"0{fmt.bits}b")
        if isinstance(fmt, FloatFormat):
            fields = _split_bits(bits, fmt)
            kind = code_class(value, code, fmt)
        else:
            fields, kind = bits, "integer"
        rows.append([f"0x{code:02x}", fields, value, kind])
    return Table(
        key=f"codes_{fmt.name}",
        title=f"All {fmt.code_count} codes of {fmt.name}",
        columns=["code", "bits", "value", "class"],
        rows=rows,
        note="bits are sign|exponent|mantissa for floats and two's complement for integers.",
        formats={"value": ".10g"},
    )


def codes_result(spec: str | Format) -> LabResult:
    """The formats lab for one format's code table (`precisionlab formats --codes FORMAT`)."""
    table = code_table(spec)
    fmt = get_format(spec)
    note = custom_format_note(spec, fmt) if isinstance(spec, str) else None
    return LabResult(name="formats", title=table.title, sections=[table], summary=f"{note}." if note else "")


CUSTOM_NAME = re.compile(r"^u?e\d+m\d+")
"""The start of a custom e<E>m<M>... name."""


def custom_format_note(spec: str, fmt: Format) -> str | None:
    """'custom format e4m4: E=4, M=4, bias 7, IEEE-like' when spec is not a registered name (None when it is).

    An unregistered name that parses as e<E>m<M>... is a valid custom layout, but a misspelt registered
    name (e4m4 for e4m3) would otherwise pass without a word."""
    key = spec.strip().lower()
    if key in format_names() or not isinstance(fmt, FloatFormat) or not CUSTOM_NAME.match(key):
        return None  # registered, or a name of another grammar (P3109's binary<K>p<P>...)
    encoding = {"ieee": "IEEE-like (inf and NaN)", "fn": "fn (no inf, NaN at the all-ones code)",
                "fnuz": "fnuz (no inf, no -0, one NaN at 0x80)", "finite": "finite (no inf, no NaN)"}
    sign = "" if fmt.signed else ", unsigned"
    return (f"custom format {fmt.name}: E={fmt.exp_bits}, M={fmt.man_bits}, bias {fmt.bias}, "
            f"{encoding.get(fmt.encoding.value, fmt.encoding.value)}{sign}, {fmt.bits} bits; "
            "not a registered name (see `precisionlab formats`)")


def _split_bits(bits: str, fmt: FloatFormat) -> str:
    sign = 1 if fmt.signed else 0
    parts = [bits[:sign], bits[sign : sign + fmt.exp_bits], bits[sign + fmt.exp_bits :]]
    return "|".join(p for p in parts if p)


def range_precision_figure(formats: list[FloatFormat]) -> Figure:
    series = [
        Series(
            f.name,
            [f.decimal_digits],
            [math.log10(f.max_finite) - math.log10(f.min_subnormal)],  # the ratio overflows for fp64
            kind="scatter",
        )
        for f in formats
    ]
    return Figure(
        key="range_vs_precision",
        title="Range against precision: exponent bits buy range, mantissa bits buy precision",
        xlabel="precision: decimal digits (M+1)·log10 2",
        ylabel="dynamic range: decades from min subnormal to max finite",
        series=series,
        yscale="log",
    )


def chosen_formats(specs: list[str] | tuple[str, ...] = ()) -> list[Format]:
    """The formats named (registry names, custom e<E>m<M>, P3109 binary<K>p<P>...), where 'p3109'
    stands for the P3109 formats of width 8 and 'p3109:K' for those of width K; none: the registry."""
    if not specs:
        return list_formats()
    chosen: list[Format] = []
    for spec in specs:
        family, _, width = spec.strip().lower().partition(":")
        if family == "p3109":
            if width and not width.isdigit():
                raise ValueError(f"{spec!r}: write p3109 or p3109:<K> with a width K from 2 to 16")
            chosen.extend(p3109_formats(int(width) if width else 8))
        else:
            chosen.append(get_format(spec))
    return chosen


def run(specs: list[str] | tuple[str, ...] = ()) -> LabResult:
    """The table of every registered format, or of the formats named (see chosen_formats)."""
    chosen = chosen_formats(specs)
    floats = [f for f in chosen if isinstance(f, FloatFormat)]
    findings: dict[str, Scalar] = {}
    for f in floats:
        findings[f"max_finite.{f.name}"] = f.max_finite
        findings[f"min_normal.{f.name}"] = f.min_normal
        findings[f"min_subnormal.{f.name}"] = f.min_subnormal
        findings[f"eps.{f.name}"] = f.eps
    notes = []
    for spec in specs:
        with contextlib.suppress(ValueError):  # a family keyword (p3109, p3109:K) is not one format
            note = custom_format_note(spec, get_format(spec))
            if note:
                notes.append(f"{note}. ")
    return LabResult(
        name="formats",
        title="Formats: derived limits of " + ("the formats named" if specs else "every registered format"),
        sections=[format_table(chosen)],
        figures=[range_precision_figure(floats)],
        findings=findings,
        summary="".join(notes) + _summary(floats),
    )


def _summary(floats: list[FloatFormat]) -> str:
    by_name = {f.name: f for f in floats}
    headline = f"{len(floats)} float formats."
    if all(name in by_name for name in ("fp16", "bf16", "e4m3")):
        fp16, bf16, e4m3 = by_name["fp16"], by_name["bf16"], by_name["e4m3"]
        headline = (f"{len(floats)} float formats: fp16 tops out at {fp16.max_finite:g} and e4m3 at "
                    f"{e4m3.max_finite:g}, while bf16 keeps fp32's range (max {bf16.max_finite:.3g}) with "
                    f"{bf16.decimal_digits:.2g} decimal digits.")
    return f"{headline} Every limit is computed from the format's defining fields; none is typed in."


LAB = Lab(name="formats", title="Formats table", run=run, order=0)
