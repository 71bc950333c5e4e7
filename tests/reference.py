"""An independent, slow, exact reference for rounding: rational arithmetic straight from
the definitions (value = m * 2^(e - M)), sharing no code with the engine's bit tricks.

A format is described here only by its defining fields (E, M, bias, encoding, signedness,
subnormals); every limit the reference uses (the largest finite value, the smallest
positive value, which codes are inf or NaN, whether -0 exists) is derived in this module
from the encoding rules, never read from precisionlab, so a wrong limit in src makes the
tests that use it fail.

Encoding rules, on the magnitude code c = (field << M) | mant:

    value      field >= 1, or no subnormals:  (2^M + mant) * 2^(field - bias - M)
               field == 0 with subnormals:    mant * 2^(1 - bias - M)
    ieee       the all-ones field holds only ±inf (mant 0) and NaN
    fn         only the all-ones magnitude code is NaN (one per sign)
    fnuz       every magnitude code is a number; the negative-zero code is the one NaN
    finite     every code is a number
    extended   (fn, fnuz) the largest magnitude code that is not NaN is ±inf (P3109)

Rounding, as the P3109 draft's Project step defines it: round x on the format's grid with the
exponent unbounded above (RoundToPrecision), then Saturate the result into [M_lo, M_hi], where
M_hi = max_finite and M_lo = -max_finite (signed) or the smallest value (unsigned: 0 where the
format has a zero). Out of range: saturate / saturate_propagate give the bound (saturate_propagate
keeps an infinite input infinite where the format has inf); a mode that moved the value toward the
range (toward_zero; toward_positive below it; toward_negative above it) gives the bound for a finite
input; otherwise ±inf where the format has that infinity, else NaN (P3109 SatNone), and a format with
neither saturates.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

ENCODINGS = ("ieee", "fn", "fnuz", "finite")
MODES = ("nearest_even", "nearest_away", "toward_zero")
NEW_MODES = ("toward_positive", "toward_negative", "to_odd")
SATURATING = ("saturate", "saturate_propagate")


def floor_log2(x: Fraction) -> int:
    """floor(log2 x) for x > 0, exactly."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if pow2(e) > x:
        e -= 1
    elif pow2(e + 1) <= x:
        e += 1
    return e


@functools.lru_cache(maxsize=4096)
def pow2(e: int) -> Fraction:
    return Fraction(2) ** e


@dataclass(frozen=True)
class RefFormat:
    """A float format as its definition; everything else is derived here.

    ties_up: the tie rule of a format without mantissa bits. False (the default) sends a tie
    to the neighbour with the even code, as IEEE 754 does for every format with a mantissa
    and as the P3109 drafts and gfloat do for mantissa-free ones; True sends it up (away from
    zero), which is ml_dtypes' float8_e8m0fnu convention.
    """

    E: int
    M: int
    bias: int
    encoding: str = "ieee"
    signed: bool = True
    subnormals: bool = True
    ties_up: bool = False
    extended: bool = False

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(self.encoding)
        if self.extended and self.encoding not in ("fn", "fnuz"):
            raise ValueError("extended needs fn or fnuz")

    # --- codes -------------------------------------------------------------------------
    @property
    def top_field(self) -> int:
        return (1 << self.E) - 1

    def magnitude_value(self, code: int) -> Fraction | str:
        """Value of a magnitude code (no sign bit): a Fraction, 'inf' or 'nan'."""
        field, mant = code >> self.M, code & ((1 << self.M) - 1)
        if self.encoding == "ieee" and field == self.top_field:
            return "inf" if mant == 0 else "nan"
        all_ones = (1 << (self.E + self.M)) - 1
        if self.encoding == "fn" and code == all_ones:
            return "nan"
        if self.extended and code == all_ones - (1 if self.encoding == "fn" else 0):
            return "inf"
        if field == 0 and self.subnormals:
            return mant * pow2(1 - self.bias - self.M)
        return ((1 << self.M) + mant) * pow2(field - self.bias - self.M)

    @property
    def largest_number_code(self) -> int:
        """The largest magnitude code that is a finite number."""
        all_ones = (1 << (self.E + self.M)) - 1
        if self.encoding == "ieee":  # the whole top field is inf / NaN: the binade below, all ones
            return ((self.top_field - 1) << self.M) | ((1 << self.M) - 1)
        below_nan = all_ones - 1 if self.encoding == "fn" else all_ones
        return below_nan - 1 if self.extended else below_nan  # extended: inf takes the top number code

    # --- derived limits -----------------------------------------------------------------
    @functools.cached_property
    def max_finite(self) -> Fraction:
        value = self.magnitude_value(self.largest_number_code)
        assert isinstance(value, Fraction)
        return value

    @functools.cached_property
    def min_positive(self) -> Fraction:
        """The smallest positive value: code 1 with subnormals (or M = 0), else code 0."""
        value = self.magnitude_value(1 if self.subnormals else 0)
        assert isinstance(value, Fraction)
        return value

    @property
    def emin(self) -> int:
        """Exponent of the first binade with a uniform quantum 2^(emin - M) below it."""
        return 1 - self.bias if self.subnormals else -self.bias

    @property
    def has_inf(self) -> bool:
        return self.encoding == "ieee" or self.extended

    @property
    def has_nan(self) -> bool:
        return self.encoding != "finite"

    @property
    def has_zero(self) -> bool:
        return self.subnormals

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.encoding != "fnuz" and self.has_zero

    @property
    def default_overflow(self) -> str:
        return "inf" if self.has_inf else "nan" if self.has_nan else "saturate"

    def finite_values(self) -> list[Fraction]:
        """Every finite non-negative value, by enumerating the magnitude codes (small formats)."""
        values = [self.magnitude_value(c) for c in range(1 << (self.E + self.M))]
        return sorted(v for v in values if isinstance(v, Fraction))

    def code_of(self, value: Fraction) -> int:
        """Magnitude code of a member (value >= 0, below the top binade's end)."""
        if value == 0:
            return 0
        e = max(floor_log2(value), self.emin)
        significand = value / pow2(e - self.M)
        assert significand.denominator == 1, value
        n = significand.numerator
        if n < 1 << self.M:  # subnormal
            return n
        return ((e + self.bias) << self.M) | (n - (1 << self.M))

    def quantum(self, member: Fraction) -> Fraction:
        """The gap from a member (>= 0) to the next grid point above it."""
        exponent = max(floor_log2(member), self.emin) if member > 0 else self.emin
        return pow2(exponent - self.M)

    def midpoint_above(self, magnitude: Fraction) -> Fraction:
        """The midpoint between the member at or below magnitude (max_finite beyond the range) and
        the next grid point above it (the one past max_finite included)."""
        lower = self._round_magnitude(magnitude, "toward_zero")
        assert lower is not None
        return lower + self.quantum(lower) / 2

    def neighbours(self, x: float) -> tuple[Fraction, Fraction]:
        """(largest member <= x, smallest member >= x) for a finite x with |x| <= max_finite
        (x itself twice when it is a member), in a signed format or for x >= 0."""
        magnitude = abs(Fraction(x))
        assert magnitude <= self.max_finite and (self.signed or x >= 0)
        inner = self._round_magnitude(magnitude, "toward_zero")
        assert inner is not None
        outer = inner if inner == magnitude else inner + self.quantum(inner)
        return (-outer, -inner) if x < 0 else (inner, outer)

    def overflow_value(self, negative: bool, policy: str | None = None) -> float:
        """What a finite value past ±max_finite becomes under the policy (None: the default)."""
        return self._overflowed(negative, policy or self.default_overflow, "nearest_even", finite=True)

    @property
    def lowest(self) -> Fraction:
        """M_lo of an unsigned format: its smallest value (0 where it has a zero)."""
        return Fraction(0) if self.has_zero else self.min_positive

    # --- rounding -----------------------------------------------------------------------
    def round(self, x: float | int | Fraction, mode: str = "nearest_even", overflow: str | None = None) -> float:
        """Round x (exactly, from its value: a float, an integer or any rational) to the format; NaN where the
        result is NaN.

        overflow None is the format's default. A NaN input gives NaN whatever the format
        (the caller decides what a format without NaN does with it).
        """
        policy = overflow or self.default_overflow
        if isinstance(x, float) and math.isnan(x):
            return math.nan
        negative = (x < 0) or (isinstance(x, float) and math.copysign(1.0, x) < 0)
        infinite = isinstance(x, float) and math.isinf(x)
        if negative and not self.signed:
            return self._round_negative_unsigned(x, mode, policy)
        if infinite:
            return self._overflowed(negative, policy, mode, finite=False)
        magnitude = abs(Fraction(x))
        rounded = self._round_magnitude(magnitude, mode, negative)
        if rounded is None:  # beyond the range
            return self._overflowed(negative, policy, mode, finite=True)
        if rounded == 0:
            if not self.has_zero:
                return math.nan if self.has_nan else float(self.min_positive)
            return -0.0 if negative and self.has_negative_zero else 0.0
        return -float(rounded) if negative else float(rounded)

    def _round_negative_unsigned(self, x: float | int, mode: str, policy: str) -> float:
        """x <= 0 (or -0.0, -inf) in an unsigned format: -0 and a rounding to zero are +0; a result
        below zero is under the range [M_lo, M_hi]."""
        if x == 0:  # -0.0
            if not self.has_zero:
                return math.nan if self.has_nan else float(self.min_positive)
            return 0.0
        infinite = isinstance(x, float) and math.isinf(x)
        if not infinite and self.has_zero and self._round_magnitude(abs(Fraction(x)), mode, True) == 0:
            return 0.0
        toward_range = mode in ("toward_zero", "toward_positive") and not infinite
        if policy in SATURATING or toward_range or not self.has_nan:
            return float(self.lowest)
        return math.nan  # P3109 SatNone: an unsigned format has no -inf

    @staticmethod
    def _moves_toward_zero(mode: str, negative: bool) -> bool:
        """Whether the mode rounds the magnitude down (toward zero) for a value of this sign."""
        return (mode == "toward_zero" or (mode == "toward_positive" and negative)
                or (mode == "toward_negative" and not negative))

    def _round_magnitude(self, magnitude: Fraction, mode: str, negative: bool = False) -> Fraction | None:
        """The rounded magnitude of a value of the given sign, or None when it lies beyond max_finite."""
        if magnitude == 0:
            return Fraction(0)
        if not self.has_zero and magnitude < self.min_positive:
            return self.min_positive  # nothing is smaller, and there is no zero
        exponent = max(floor_log2(magnitude), self.emin)
        quantum = pow2(exponent - self.M)
        q = magnitude / quantum
        floor = q.numerator // q.denominator
        frac = q - floor
        lower = floor * quantum
        up = False
        if mode == "nearest_away":
            up = frac >= Fraction(1, 2)
        elif mode == "nearest_even":
            if frac == Fraction(1, 2):
                up = (self.M == 0 and self.ties_up) or self._code_is_odd(lower)
            else:
                up = frac > Fraction(1, 2)
        elif mode in ("toward_positive", "toward_negative"):
            up = frac > 0 and not self._moves_toward_zero(mode, negative)
        elif mode == "to_odd":
            up = frac > 0 and not self._code_is_odd(lower)
        elif mode != "toward_zero":
            raise ValueError(mode)
        rounded = lower + quantum if up else lower
        if rounded > self.max_finite:
            return self.max_finite if self._moves_toward_zero(mode, negative) else None
        return rounded

    def _code_is_odd(self, lower: Fraction) -> bool:
        return self.code_of(lower) % 2 == 1

    def _overflowed(self, negative: bool, policy: str, mode: str, finite: bool) -> float:
        """What a value past ±max_finite (finite, or ±inf) becomes."""
        if finite and self._moves_toward_zero(mode, negative):
            magnitude = float(self.max_finite)
        elif policy == "saturate_propagate" and not finite and self.has_inf:
            magnitude = math.inf
        elif policy in SATURATING:
            magnitude = float(self.max_finite)
        elif policy == "inf":
            magnitude = math.inf
        else:
            return math.nan
        return -magnitude if negative else magnitude


def ref_format(fmt: object) -> RefFormat:
    """The RefFormat with a precisionlab FloatFormat's defining fields (and no derived value)."""
    return RefFormat(
        fmt.exp_bits,  # type: ignore[attr-defined]
        fmt.man_bits,  # type: ignore[attr-defined]
        fmt.bias,  # type: ignore[attr-defined]
        fmt.encoding.value,  # type: ignore[attr-defined]
        fmt.signed,  # type: ignore[attr-defined]
        fmt.subnormals,  # type: ignore[attr-defined]
        extended=fmt.extended,  # type: ignore[attr-defined]
    )


@functools.lru_cache(maxsize=64)
def named_format(name: str) -> RefFormat:
    """The RefFormat of a registry name or custom spelling (its defining fields only, see ref_format)."""
    from precisionlab.formats import get_float_format

    return ref_format(get_float_format(name))


def round_rational(q: Fraction, name: str, mode: str = "nearest_even") -> float:
    """The exact rational q rounded once to the format `name` (its default overflow policy): the one exact
    rounding reference the tests share (sums and products formed exactly, then rounded here)."""
    return named_format(name).round(q, mode)


def all_finite_values(E: int, M: int, bias: int, encoding: str) -> list[Fraction]:
    """Every finite non-negative value of a small signed format, from the definitions."""
    return RefFormat(E, M, bias, encoding).finite_values()


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: equal values with equal signs, or both NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | ((a == b) & (np.signbit(a) == np.signbit(b)))


def binomial_interval(n: int, p: float, alpha: float) -> tuple[int, int]:
    """(lo, hi) with P(X < lo) <= alpha/2 and P(X > hi) <= alpha/2 for X ~ Binomial(n, p), 0 < p < 1.

    The probabilities come from the binomial pmf itself, built by its recurrence
    pmf(k + 1) = pmf(k) * (n - k) / (k + 1) * p / (1 - p) in log space.
    """
    k = np.arange(n, dtype=np.float64)
    steps = np.log(n - k) - np.log(k + 1) + math.log(p) - math.log1p(-p)
    log_pmf = np.concatenate([[n * math.log1p(-p)], n * math.log1p(-p) + np.cumsum(steps)])
    pmf = np.exp(log_pmf - log_pmf.max())
    pmf /= pmf.sum()
    below = np.cumsum(pmf)  # P(X <= k)
    above = np.cumsum(pmf[::-1])[::-1]  # P(X >= k)
    lo = int(np.argmax(below > alpha / 2))  # smallest k with P(X <= k) > alpha/2, so P(X < lo) <= alpha/2
    hi = int(len(above) - 1 - np.argmax(above[::-1] > alpha / 2))
    return lo, hi
