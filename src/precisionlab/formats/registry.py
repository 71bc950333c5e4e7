"""Named formats, their aliases, and the custom-format grammar.

Custom integers: ``int<B>`` (two's complement) and ``uint<B>`` (unsigned), B bits (1..32; signed >= 2),
e.g. ``int5`` and ``int6`` (GGUF's Q5_0 and Q6_K codes) or ``uint2`` (KIVI); like custom floats they are
looked up, not listed.

Registry names follow ml_dtypes' conventions with short aliases. `e4m3` is the OCP
format (float8_e4m3fn, max 448); the AMD gfx942 flavour is `e4m3fnuz` (max 240).

Custom floats: ``[u]e<E>m<M>[b<bias>][ieee|fn|fnuz|finite][inf]``, e.g. ``e6m9`` (IEEE-like,
bias 2^(E-1)-1), ``e4m3b8fnuz``, ``e5m2ieee``; a leading ``u`` drops the sign bit, and a trailing
``inf`` (after fn or fnuz) puts ±inf in the largest code that is not NaN (P3109's extended domain).
The registry's names keep their meaning: ``e4m3`` is always the OCP fn format; spell ``e4m3ieee``
for the IEEE-like E4M3. Default bias: 2^(E-1) - 1, or 2^(E-1) for fnuz (as AMD's FNUZ types).

IEEE P3109 formats: ``binary{K}p{P}[s|u][e|f]`` and gfloat's ``p3109_k{K}p{P}[s|u][e|f]``
(formats.p3109). Where one has the defining fields of a registered format, that format is returned
(binary8p4sf is e4m3fnuz, binary8p3sf is e5m2fnuz).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable

from precisionlab.formats.float_format import Encoding, FloatFormat
from precisionlab.formats.int_format import IntFormat
from precisionlab.formats.p3109 import parse_p3109

Format = FloatFormat | IntFormat

E = Encoding

_FLOATS: tuple[tuple[FloatFormat, tuple[str, ...]], ...] = (
    (FloatFormat("fp64", 11, 52, 1023), ("float64", "f64", "double")),
    (FloatFormat("fp32", 8, 23, 127), ("float32", "f32", "float", "single")),
    (FloatFormat("tf32", 8, 10, 127, stored_bits=32), ("tensorfloat32",)),
    (FloatFormat("bf16", 8, 7, 127), ("bfloat16",)),
    (FloatFormat("fp16", 5, 10, 15), ("float16", "f16", "half")),
    (FloatFormat("e4m3", 4, 3, 7, E.FN), ("float8_e4m3fn", "fp8_e4m3", "fp8_e4m3fn", "e4m3fn")),
    (FloatFormat("e5m2", 5, 2, 15), ("float8_e5m2", "fp8_e5m2")),
    (FloatFormat("e4m3fnuz", 4, 3, 8, E.FNUZ), ("float8_e4m3fnuz", "fp8_e4m3fnuz", "binary8p4sf")),
    (FloatFormat("e5m2fnuz", 5, 2, 16, E.FNUZ), ("float8_e5m2fnuz", "fp8_e5m2fnuz", "binary8p3sf")),
    (FloatFormat("e3m2", 3, 2, 3, E.FINITE), ("float6_e3m2fn", "fp6_e3m2")),
    (FloatFormat("e2m3", 2, 3, 1, E.FINITE), ("float6_e2m3fn", "fp6_e2m3")),
    (FloatFormat("e2m1", 2, 1, 1, E.FINITE), ("float4_e2m1fn", "fp4_e2m1", "fp4")),
    (FloatFormat("ue8m0", 8, 0, 127, E.FN, signed=False, subnormals=False), ("float8_e8m0fnu", "e8m0")),
)

_INTS: tuple[tuple[IntFormat, tuple[str, ...]], ...] = (
    (IntFormat("int8", 8), ("i8",)),
    (IntFormat("int4", 4), ("i4",)),
    (IntFormat("int2", 2), ("i2",)),
    (IntFormat("uint8", 8, signed=False), ("u8",)),
    (IntFormat("uint4", 4, signed=False), ("u4",)),
)

FLOAT_FORMATS: tuple[FloatFormat, ...] = tuple(f for f, _ in _FLOATS)
INT_FORMATS: tuple[IntFormat, ...] = tuple(f for f, _ in _INTS)

_BY_NAME: dict[str, Format] = {}
_ENTRIES: tuple[tuple[Format, tuple[str, ...]], ...] = (*_FLOATS, *_INTS)
for _fmt, _aliases in _ENTRIES:
    for _name in (_fmt.name, *_aliases):
        _BY_NAME[_name] = _fmt

_BY_FIELDS: dict[tuple[object, ...], FloatFormat] = {f.defining_fields: f for f in FLOAT_FORMATS}

_CUSTOM = re.compile(
    r"^(?P<u>u?)e(?P<e>\d+)m(?P<m>\d+)(?:b(?P<bias>-?\d+))?(?P<enc>ieee|fnuz|fn|finite)?(?P<inf>inf)?$")


def list_formats(kind: str = "all") -> list[Format]:
    """Registered formats in table order. kind: 'all', 'float' or 'int'."""
    if kind not in ("all", "float", "int"):
        raise ValueError(f"kind must be 'all', 'float' or 'int', got {kind!r}")
    floats: list[Format] = list(FLOAT_FORMATS)
    ints: list[Format] = list(INT_FORMATS)
    return {"all": floats + ints, "float": floats, "int": ints}[kind]


def format_names() -> list[str]:
    return list(_BY_NAME)


def get_format(spec: str | Format, *, bias: int | None = None, encoding: str | Encoding | None = None,
               extended: bool | None = None) -> Format:
    """Look up a registered format, parse a custom or P3109 one, or pass a format object through.

    `bias`, `encoding` and `extended` build a variant of a float format (for example
    ``get_format("e4m3", bias=8, encoding="fnuz")`` is ``e4m3fnuz``'s layout).
    """
    if isinstance(spec, (FloatFormat, IntFormat)):
        fmt: Format = spec
    elif isinstance(spec, str):
        fmt = _lookup(spec)
    else:
        raise TypeError(f"a format is a name or a format object, got {type(spec).__name__}")
    if bias is None and encoding is None and extended is None:
        return fmt
    if not isinstance(fmt, FloatFormat):
        raise ValueError(f"bias, encoding and extended apply to float formats, not {fmt.name}")
    enc = _encoding(encoding) if encoding is not None else fmt.encoding
    new_bias = bias if bias is not None else _default_bias(fmt.exp_bits, enc)
    inf = fmt.extended if extended is None else extended
    name = f"{'u' if not fmt.signed else ''}e{fmt.exp_bits}m{fmt.man_bits}b{new_bias}{enc.value}{'inf' if inf else ''}"
    return dataclasses.replace(fmt, name=name, bias=new_bias, encoding=enc, extended=inf)


def get_float_format(spec: str | Format) -> FloatFormat:
    """get_format for callers that need a float format; an integer format is a TypeError."""
    fmt = get_format(spec)
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"{fmt.name} is an integer format; a float format is needed here")
    return fmt


_CUSTOM_INT = re.compile(r"^(?P<u>u?)int(?P<bits>\d{1,2})$")


def _custom_int(key: str) -> IntFormat | None:
    """int<B> / uint<B> (IntFormat refuses impossible widths: 0 bits, a 1-bit signed integer, > 32 bits)."""
    integer = _CUSTOM_INT.match(key)
    if integer is None:
        return None
    bits, unsigned = int(integer["bits"]), bool(integer["u"])
    return IntFormat(f"{'u' if unsigned else ''}int{bits}", bits, signed=not unsigned)


def _lookup(spec: str) -> Format:
    key = spec.strip().lower()
    if key not in _BY_NAME and (integer := _custom_int(key)) is not None:
        return integer
    if key in _BY_NAME:
        return _BY_NAME[key]
    p3109 = parse_p3109(key)
    if p3109 is not None:
        return _BY_FIELDS.get(p3109.defining_fields, p3109)
    match = _CUSTOM.match(key)
    if match is None:
        hint = "; P3109 formats are binary<K>p<P>[s|u][e|f], e.g. binary8p3se" if key.startswith(("binary", "p3109")) \
            else _suggest(key, _BY_NAME)
        raise ValueError(f"unknown format {spec!r}{hint}")
    exp_bits, man_bits = int(match["e"]), int(match["m"])
    enc = _encoding(match["enc"] or "ieee")
    bias = int(match["bias"]) if match["bias"] is not None else _default_bias(exp_bits, enc)
    unsigned = bool(match["u"])
    return FloatFormat(
        key,
        exp_bits,
        man_bits,
        bias,
        enc,
        signed=not unsigned,
        subnormals=not (unsigned and man_bits == 0),
        extended=bool(match["inf"]),
    )


def _default_bias(exp_bits: int, encoding: Encoding) -> int:
    half = 1 << max(exp_bits - 1, 0)
    return half if encoding is Encoding.FNUZ else half - 1


def _encoding(value: str | Encoding) -> Encoding:
    if isinstance(value, Encoding):
        return value
    try:
        return Encoding(value.lower())
    except ValueError:
        choices = ", ".join(e.value for e in Encoding)
        raise ValueError(f"unknown encoding {value!r}; choose one of {choices}") from None


def _suggest(key: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(names), n=4, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else "; see `precisionlab formats`"
