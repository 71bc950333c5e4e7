"""Explain one value in one or every format: fields, code, stored value, neighbours, ulp, error.

Not a registered lab (it needs a value); `precisionlab explain` renders it.
"""

from __future__ import annotations

import math
from fractions import Fraction

from precisionlab.formats import Format, IntFormat, Overflow, get_format, list_formats
from precisionlab.results import LabResult, Scalar, Table
from precisionlab.rounding import decode, encode, neighbours, round_to, ulp
from precisionlab.rounding.modes import overflow_policy, parse_rounding

COLUMNS = ["format", "sign", "exponent", "mantissa", "code", "stored", "below", "above", "ulp", "abs error",
           "rel error"]


INFINITIES = ("inf", "+inf", "-inf", "infinity", "+infinity", "-infinity")
NANS = ("nan", "+nan", "-nan")


def parse_real(text: str, what: str = "value", allow_infinity: bool = True) -> float:
    """A decimal number as float64 reads it, refusing what float64 would silently change.

    inf / -inf / nan are taken only as written (and only when allow_infinity); a finite decimal
    beyond float64's range (1e400, which float() reads as inf) or a nonzero one below its smallest
    subnormal (1e-400, read as 0) is a ValueError that says so. Both `explain VALUE` and
    `limits --value` read their numbers through this one rule."""
    stripped = text.strip().lower()
    try:
        value = float(stripped)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None
    written_special = stripped in INFINITIES or stripped in NANS
    if written_special:
        if not allow_infinity:
            raise ValueError(f"{what} must be finite, got {text!r}")
        return value
    if math.isinf(value):
        raise ValueError(f"{what} {text!r} is beyond float64's range (largest finite 1.7976931348623157e308); "
                         "write inf for infinity")
    if value == 0 and any(ch in "123456789" for ch in stripped.split("e")[0]):
        raise ValueError(f"{what} {text!r} is below float64's smallest subnormal (4.9e-324) and would read as 0; "
                         "write 0 for zero")
    return value


def parse_value(text: str) -> tuple[float | None, int | None]:
    """'0x7e' is a code; anything else must parse as a real number (see parse_real)."""
    stripped = text.strip().lower()
    if stripped.startswith(("0x", "-0x")) and not stripped.startswith("-"):
        try:
            return None, int(stripped, 16)
        except ValueError:
            raise ValueError(f"{text!r} is not a hexadecimal code") from None
    try:
        float(stripped)
    except ValueError:
        raise ValueError(f"{text!r} is not a number (or a hexadecimal code such as 0x7e)") from None
    return parse_real(text, "VALUE"), None


def split_fields(code: int, fmt: Format) -> tuple[str, str, str]:
    bits = format(code, f"0{fmt.bits}b")
    if isinstance(fmt, IntFormat):
        return "", "", bits
    sign = bits[0] if fmt.signed else ""
    rest = bits[1:] if fmt.signed else bits
    return sign, rest[: fmt.exp_bits], rest[fmt.exp_bits :]


def explain_row(value: float, fmt: Format, rounding: str, overflow: str | None) -> list[Scalar]:
    code = int(encode(value, fmt, rounding=rounding, overflow=overflow, nan="zero"))
    stored = float(round_to(value, fmt, rounding=rounding, overflow=overflow, nan="zero"))
    below, above = neighbours(value, fmt)
    sign, exponent, mantissa = split_fields(code, fmt)
    abs_err: float = math.nan
    rel_err: float = math.nan
    if math.isfinite(value) and math.isfinite(stored):
        err = Fraction(stored) - Fraction(value)
        abs_err = float(abs(err))
        rel_err = float(abs(err) / abs(Fraction(value))) if value != 0 else 0.0
    width = (fmt.bits + 3) // 4
    return [fmt.name, sign, exponent, mantissa, f"0x{code:0{width}x}", stored, below, above,
            float(ulp(value, fmt)), abs_err, rel_err]


def explain(text: str, format_spec: str = "bf16", rounding: str = "nearest_even",
            overflow: str | None = None) -> LabResult:
    value, code = parse_value(text)
    formats = list_formats() if format_spec == "all" else [get_format(format_spec)]
    note = custom_format_note(format_spec, formats[0]) if format_spec != "all" else None
    summary = f"{note}." if note else ""
    parse_rounding(rounding)  # a bad mode or policy is an error even where it does not apply (a code)
    overflow_policy(overflow, Overflow.SATURATE)  # a bad policy name is an error here too
    if code is not None:
        if len(formats) != 1:
            raise ValueError("a code belongs to one format: pass --format NAME, not all")
        fmt = formats[0]
        decoded = float(decode(code, fmt))
        sign, exponent, mantissa = split_fields(code, fmt)
        kind = _kind(decoded, code, fmt)
        table = Table(key="decode", title=f"Code {text} in {fmt.name}",
                      columns=["format", "code", "sign", "exponent", "mantissa", "value", "class"],
                      rows=[[fmt.name, f"0x{code:x}", sign, exponent, mantissa, decoded, kind]],
                      formats={"value": ".17g"})
        return LabResult(name="explain", title=f"explain {text}", sections=[table],
                         findings={"value": decoded}, summary=summary)
    assert value is not None
    if math.isnan(value) and len(formats) == 1 and not formats[0].has_nan:
        raise ValueError(f"{formats[0].name} has no NaN: NaN cannot be stored in it")
    rows = []
    for fmt in formats:
        if math.isnan(value) and not fmt.has_nan:
            continue  # integers and fp4/fp6 have no NaN (round_to raises unless nan='zero')
        rows.append(explain_row(value, fmt, rounding, overflow if fmt.is_float else None))
    table = Table(
        key="explain",
        title=f"{text} rounded ({rounding}) to {format_spec}",
        columns=COLUMNS,
        rows=rows,
        note="below/above: the representable neighbours enclosing the value; ulp: grid spacing at the value; "
             "errors are exact (rational arithmetic) against the decimal value as parsed to float64.",
        formats={"stored": ".10g", "below": ".10g", "above": ".10g", "ulp": ".4g", "abs error": ".4g",
                 "rel error": ".4g"},
    )
    return LabResult(name="explain", title=f"explain {text}", sections=[table],
                     findings={f"stored.{r[0]}": r[5] for r in rows}, summary=summary)


def custom_format_note(spec: str, fmt: Format) -> str | None:
    from precisionlab.labs.formats_table import custom_format_note as note

    return note(spec, fmt)


def _kind(value: float, code: int, fmt: Format) -> str:
    if isinstance(fmt, IntFormat):
        return "integer"
    from precisionlab.labs.formats_table import code_class

    return code_class(value, code, fmt)
