"""An independent, slow, exact reference for rounding: rational arithmetic straight from
the definitions (value = m * 2^(e - M)), sharing no code with the engine's bit tricks."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def floor_log2(x: Fraction) -> int:
    """floor(log2 x) for x > 0, exactly."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    elif Fraction(2) ** (e + 1) <= x:
        e += 1
    return e


def round_integer(q: Fraction, mode: str) -> int:
    """Round q >= 0 to an integer."""
    floor = q.numerator // q.denominator
    frac = q - floor
    if mode == "toward_zero":
        return floor
    if mode == "nearest_away":
        return floor + (1 if frac >= Fraction(1, 2) else 0)
    if mode == "nearest_even":
        if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and floor % 2 == 1):
            return floor + 1
        return floor
    raise ValueError(mode)


def ref_round(x: float, E: int, M: int, bias: int, max_finite: Fraction, mode: str = "nearest_even",
              overflow: str = "inf", subnormals: bool = True) -> float:
    """Round x (exactly, from its float64 value) to the grid of (E, M, bias) with max_finite."""
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        return _overflowed(x, overflow, max_finite)
    value = Fraction(x)
    if value == 0:
        return x
    sign = -1 if value < 0 else 1
    magnitude = abs(value)
    emin = 1 - bias if subnormals else -bias
    exponent = max(floor_log2(magnitude), emin)
    quantum = Fraction(2) ** (exponent - M)
    rounded = round_integer(magnitude / quantum, mode) * quantum
    if not subnormals and rounded < Fraction(2) ** emin:
        rounded = Fraction(2) ** emin
    if rounded > max_finite:
        if mode == "toward_zero":
            return sign * float(max_finite)
        return _overflowed(sign * 1.0, overflow, max_finite)
    return math.copysign(float(rounded), sign) if rounded != 0 else math.copysign(0.0, sign)


def _overflowed(x: float, overflow: str, max_finite: Fraction) -> float:
    if overflow == "inf":
        return math.copysign(math.inf, x)
    if overflow == "nan":
        return math.nan
    return math.copysign(float(max_finite), x)


def all_finite_values(E: int, M: int, bias: int, encoding: str) -> list[Fraction]:
    """Every finite non-negative value of a small signed format, from the definitions."""
    values = set()
    top = (1 << E) - 1
    for field in range(1 << E):
        for mant in range(1 << M):
            if encoding == "ieee" and field == top:
                continue
            if encoding == "fn" and field == top and mant == (1 << M) - 1:
                continue
            if field == 0:
                values.add(Fraction(mant) * Fraction(2) ** (1 - bias - M))
            else:
                values.add(Fraction((1 << M) + mant) * Fraction(2) ** (field - bias - M))
    return sorted(values)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: equal values with equal signs, or both NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | ((a == b) & (np.signbit(a) == np.signbit(b)))
