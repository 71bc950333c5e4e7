"""The formats lab: every format's limits derived from (E, M, bias, encoding), and code tables."""

from __future__ import annotations

import math

import numpy as np

from precisionlab.formats import FloatFormat, Format, IntFormat, get_format, list_formats, p3109_formats
from precisionlab.labs import Lab
from precisionlab.labs.result import Figure, LabResult, Scalar, Series, Table
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
    return LabResult(
        name="formats",
        title="Formats: derived limits of " + ("the formats named" if specs else "every registered format"),
        sections=[format_table(chosen)],
        figures=[range_precision_figure(floats)],
        findings=findings,
        summary="Every limit is computed from the format's defining fields; none is typed in.",
    )


LAB = Lab(name="formats", title="Formats table", run=run, order=0)
