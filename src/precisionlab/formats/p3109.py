"""The IEEE P3109 family: binary{K}p{P}, signed or unsigned, finite or extended.

A P3109 format of width K and precision P (significand bits, the implicit one included) is an
ordinary FloatFormat with these defining fields:

    M         = P - 1                          trailing significand bits
    E         = K - P      (signed)            exponent field width
              = K - P + 1  (unsigned)          (no sign bit)
    bias      = 2^(E - 1)                      2^(K-P-1) signed, 2^(K-P) unsigned
    zero      one (code 0); subnormals; no -0
    NaN       one: 0x80... (the negative-zero code) when signed -> encoding fnuz;
              the all-ones code when unsigned                 -> encoding fn, unsigned
    extended  ±inf in the largest magnitude code that is not NaN (0x7F / 0xFF signed,
              0xFE unsigned); finite formats spend that code on a number

Names: ``binary{K}p{P}{s|u}{e|f}`` (the draft's spelling, lower case: ``binary8p3se``),
gfloat's ``p3109_k{K}p{P}{s|u}{e|f}``; the suffixes default to signed (s) and extended (e), the
draft's original formats, so ``binary8p3`` and ``p3109_k8p3`` are ``binary8p3se``. Two of the family
are ml_dtypes types: binary8p4sf is float8_e4m3fnuz and binary8p3sf is float8_e5m2fnuz (the
registry returns those formats; float8_e4m3b11fnuz, bias 11, is not P3109's bias 8).

Not every (K, P) pair is a format here. P = K needs the sign bit for the significand, so only
unsigned formats have it (the draft leaves signed K = P undefined; gfloat builds one with no
exponent field and bias 0). binary2p1se holds no finite number but 0 (its codes are 0, +inf, NaN,
-inf) and binary2p2ue no normal number (0, 0.5, +inf, NaN): both are refused with that reason.
An exponent field of 11 bits or more (binary11p1u, binary12p1s, ..., binary16p5s) spans a range
beyond float64's, which the emulation computes in: FloatFormat refuses those as it does e12m3.
Every format with K <= 10 is available.
"""

from __future__ import annotations

import re

from precisionlab.formats.float_format import Encoding, FloatFormat

MIN_WIDTH, MAX_WIDTH = 2, 16

_NAME = re.compile(r"^(?:binary(?P<k1>\d+)p(?P<p1>\d+)|p3109[_-]?k(?P<k2>\d+)p(?P<p2>\d+))(?P<s>[su])?(?P<d>[ef])?$")


def p3109_name(width: int, precision: int, signed: bool = True, extended: bool = True) -> str:
    """The canonical registry name, binary{K}p{P}{s|u}{e|f}."""
    return f"binary{width}p{precision}{'s' if signed else 'u'}{'e' if extended else 'f'}"


def p3109_format(width: int, precision: int, signed: bool = True, extended: bool = True) -> FloatFormat:
    """The P3109 format binary{width}p{precision} (see the module docstring for the fields)."""
    name = p3109_name(width, precision, signed, extended)
    problem = _problem(width, precision, signed, extended)
    if problem:
        raise ValueError(f"no P3109 format {name}: {problem}")
    exp_bits = width - precision + (0 if signed else 1)
    encoding = Encoding.FNUZ if signed else Encoding.FN
    return FloatFormat(name, exp_bits, precision - 1, 1 << (exp_bits - 1), encoding, signed=signed,
                       subnormals=True, extended=extended)


def _problem(width: int, precision: int, signed: bool, extended: bool) -> str:
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        return f"the width K runs from {MIN_WIDTH} to {MAX_WIDTH}, got {width}"
    if not 1 <= precision <= width:
        return f"the precision P runs from 1 to K = {width}, got {precision}"
    if signed and precision == width:
        return "P = K leaves no exponent field beside the sign bit; only the unsigned format has it"
    if (width, precision, signed, extended) == (2, 1, True, True):
        return "its four codes are 0, +inf, NaN and -inf: it holds no finite number but zero"
    if (width, precision, signed, extended) == (2, 2, False, True):
        return "its four codes are 0, 0.5 (subnormal), +inf and NaN: it has no normal number"
    return ""


def parse_p3109(spec: str) -> FloatFormat | None:
    """The format a P3109 name spells (binary8p3se, p3109_k8p3, binary4p2uf, ...), or None when
    spec is not written in that grammar; ValueError when it is but names no format."""
    match = _NAME.match(spec)
    if match is None:
        return None
    width = int(match["k1"] or match["k2"])
    precision = int(match["p1"] or match["p2"])
    return p3109_format(width, precision, signed=match["s"] != "u", extended=match["d"] != "f")


def p3109_formats(width: int = 8) -> list[FloatFormat]:
    """Every P3109 format of one width that precisionlab can emulate: signed then unsigned, each by
    precision, extended before finite (the refused ones are left out; see the module docstring)."""
    found = []
    for signed in (True, False):
        for precision in range(1, width + 1):
            for extended in (True, False):
                try:
                    found.append(p3109_format(width, precision, signed, extended))
                except ValueError:
                    continue
    return found
