"""Binary floating-point formats described by (E, M, bias, encoding).

A format stores only its defining fields; every limit is derived. The magnitude codes
c = (field << M) | mantissa run from 0 to 2^(E+M) - 1; the top few are not numbers:

    specials at the top = 2^M (IEEE: the all-ones exponent is inf/NaN) | 1 (FN: the all-ones
                          code is NaN) | 0 (FNUZ, FINITE), plus 1 for an extended format (±inf
                          in the largest code that is not NaN, as P3109's extended domain)
    max finite code     = 2^(E+M) - 1 - specials at the top
    emax                = (max finite code >> M) - bias
    max finite          = (2^M + (max finite code mod 2^M)) * 2^(emax - M)
                          IEEE/FNUZ/FINITE: (2 - 2^-M) * 2^emax; FN: (2 - 2^(1-M)) * 2^emax (E4M3: 448)
    emin           = 1 - bias                     (exponent of the smallest normal)
    min normal     = 2^emin
    min subnormal  = 2^(emin - M)
    ulp(1)         = 2^-M
    decimal digits = (M + 1) * log10(2)
    binades        = emax - emin + 1
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import cached_property


class Encoding(Enum):
    """How a float format spends the top of its code space on special values."""

    IEEE = "ieee"
    """All-ones exponent: mantissa 0 is ±inf, anything else NaN (fp32, fp16, bf16, e5m2)."""
    FN = "fn"
    """Finite: no inf; only the all-ones code (per sign) is NaN (OCP e4m3 = float8_e4m3fn, ue8m0)."""
    FNUZ = "fnuz"
    """Finite, unsigned zero: no inf, no -0; the negative-zero code 0x80 is the single NaN (AMD gfx942)."""
    FINITE = "finite"
    """Neither inf nor NaN: every code is a number (OCP fp6 e3m2/e2m3 and fp4 e2m1)."""


SPECIALS_AT_TOP = {Encoding.FN: 1, Encoding.FNUZ: 0, Encoding.FINITE: 0}
"""Magnitude codes at the top of the code space that are not numbers (IEEE: 2^M, the whole top binade)."""


class Overflow(Enum):
    """What a finite value beyond ±max_finite (or ±inf) becomes."""

    INF = "inf"
    NAN = "nan"
    SATURATE = "saturate"
    """Clamp to ±max_finite, ±inf included (P3109 SatFinite, PTX .satfinite)."""
    SATURATE_PROPAGATE = "saturate_propagate"
    """Finite values past ±max_finite clamp to it; ±inf stays ±inf where the format has inf, and
    clamps where it has none (P3109 SatPropagate)."""


@dataclass(frozen=True)
class FloatFormat:
    """A sign-exponent-mantissa format. Only defining fields are stored."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    encoding: Encoding = Encoding.IEEE
    signed: bool = True
    subnormals: bool = True
    extended: bool = False
    """±inf in the largest magnitude code that is not NaN (P3109's extended domain: fn or fnuz only)."""
    stored_bits: int | None = None
    """Container width when it differs from the format's own width (tf32: 19 bits held in 32)."""

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError(f"impossible float format {self.name!r}: {problems}")
        for field_name in ("exp_bits", "man_bits", "bias"):  # numpy integers become Python ints
            object.__setattr__(self, field_name, int(getattr(self, field_name)))

    # --- layout -----------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Width of one code: sign (if any) + E + M."""
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def is_float(self) -> bool:
        return True

    @property
    def defining_fields(self) -> tuple[int, int, int, Encoding, bool, bool, bool]:
        """(E, M, bias, encoding, signed, subnormals, extended): everything that decides the format's
        values and codes. Two formats with equal defining fields are one format under two names (the
        name and the container width stored_bits change neither)."""
        return (self.exp_bits, self.man_bits, self.bias, self.encoding, self.signed, self.subnormals,
                self.extended)

    @property
    def top_exponent_field(self) -> int:
        return (1 << self.exp_bits) - 1

    # --- special values ---------------------------------------------------------
    @property
    def has_inf(self) -> bool:
        return self.encoding is Encoding.IEEE or self.extended

    @property
    def has_nan(self) -> bool:
        return self.encoding is not Encoding.FINITE

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.encoding is not Encoding.FNUZ

    @property
    def has_zero(self) -> bool:
        """A format without subnormals has no zero code (ue8m0's smallest code is 2^-127)."""
        return self.subnormals

    @property
    def default_overflow(self) -> Overflow:
        """inf where the format has inf; else NaN where it has NaN (as ml_dtypes); else saturate."""
        if self.has_inf:
            return Overflow.INF
        if self.has_nan:
            return Overflow.NAN
        return Overflow.SATURATE

    # --- exponent range -----------------------------------------------------------
    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (the smallest code when there are no subnormals)."""
        return 1 - self.bias if self.subnormals else -self.bias

    @property
    def specials_at_top(self) -> int:
        """How many of the largest magnitude codes are inf or NaN (see the module docstring)."""
        base = (1 << self.man_bits) if self.encoding is Encoding.IEEE else SPECIALS_AT_TOP[self.encoding]
        return base + int(self.extended)

    @property
    def max_finite_code(self) -> int:
        """The largest magnitude code (sign bit clear) that holds a finite number."""
        return (1 << (self.exp_bits + self.man_bits)) - 1 - self.specials_at_top

    @property
    def inf_code(self) -> int:
        """The magnitude code of +inf: the one above max_finite_code (IEEE: all-ones exponent, mantissa 0)."""
        if not self.has_inf:
            raise ValueError(f"{self.name} has no infinity")
        return self.max_finite_code + 1

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number's binade."""
        return (self.max_finite_code >> self.man_bits) - self.bias

    @property
    def max_mantissa_at_emax(self) -> int:
        """Largest mantissa field usable in the top binade (FN loses the all-ones pattern to NaN)."""
        return self.max_finite_code & ((1 << self.man_bits) - 1)

    # --- limits, exact and as floats (cached: the engine reads them on every call) ----
    @cached_property
    def max_finite_exact(self) -> Fraction:
        return Fraction((1 << self.man_bits) + self.max_mantissa_at_emax) * _pow2(self.emax - self.man_bits)

    @cached_property
    def min_normal_exact(self) -> Fraction:
        return _pow2(self.emin)

    @cached_property
    def min_subnormal_exact(self) -> Fraction:
        if not self.subnormals:
            return _pow2(self.emin)
        return _pow2(self.emin - self.man_bits)

    @cached_property
    def max_finite(self) -> float:
        return float(self.max_finite_exact)

    @cached_property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @cached_property
    def min_subnormal(self) -> float:
        return float(self.min_subnormal_exact)

    @property
    def eps(self) -> float:
        """ulp(1) = 2^-M: the gap between 1 and the next larger number."""
        return math.ldexp(1.0, -self.man_bits)

    @property
    def decimal_digits(self) -> float:
        return (self.man_bits + 1) * math.log10(2.0)

    @property
    def binades(self) -> int:
        return self.emax - self.emin + 1

    @property
    def code_count(self) -> int:
        return 1 << self.bits

    def __str__(self) -> str:
        return self.name


def _pow2(e: int) -> Fraction:
    return Fraction(2) ** e


def _problems(fmt: FloatFormat) -> str:
    for field_name in ("exp_bits", "man_bits", "bias"):
        value = getattr(fmt, field_name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return f"{field_name} must be an integer, got {value!r}"
    if not isinstance(fmt.encoding, Encoding):
        return f"encoding must be an Encoding, got {fmt.encoding!r}"
    if fmt.exp_bits < 1:
        return "needs at least one exponent bit"
    if fmt.man_bits < 0:
        return "mantissa bits cannot be negative"
    if not isinstance(fmt.extended, bool):
        return f"extended must be a bool, got {fmt.extended!r}"
    if fmt.extended and fmt.encoding not in (Encoding.FN, Encoding.FNUZ):
        return "extended (±inf below the NaN code) needs the fn or fnuz encoding (ieee has its own inf)"
    if fmt.encoding is Encoding.IEEE and fmt.exp_bits < 2:
        return "an IEEE-style format needs at least 2 exponent bits (one exponent is inf/NaN)"
    if fmt.encoding is Encoding.FNUZ and not fmt.signed:
        return "FNUZ puts NaN at the negative-zero code, so it needs a sign bit"
    if not fmt.subnormals and fmt.man_bits != 0:
        return "only mantissa-free (power-of-two) formats may omit subnormals"
    if fmt.bits > 64:
        return f"{fmt.bits} bits is wider than 64"
    if fmt.man_bits > 52:
        return "more than 52 mantissa bits cannot be emulated exactly in float64"
    if fmt.encoding is Encoding.IEEE and fmt.man_bits == 0:
        return "an IEEE-style format needs a mantissa bit to encode NaN"
    if fmt.max_finite_code < 0 or (fmt.max_finite_code >> fmt.man_bits == 0 and fmt.subnormals):
        return "no finite normal number (its top codes are all inf or NaN)"
    if fmt.emax > 1023 or fmt.emin < -1022:
        return "its range does not fit inside float64, which the emulation computes in"
    return ""
