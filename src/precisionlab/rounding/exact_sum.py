"""Error-free transformations on float64 arrays: the exact sum as a pair, and round-to-odd.

    two_sum(a, b) -> (hi, lo) with hi = fl64(a + b) and hi + lo = a + b exactly (Knuth's TwoSum,
    six float64 operations, no branches, valid without overflow).

    round_to_odd(hi, lo) -> z: a + b rounded to float64 "to odd": truncated toward zero, and
    its last bit forced to 1 when the sum was inexact.

Round-to-odd is what makes one rounding exact through an intermediate format
(Boldo & Melquiond, 2008): if q >= p + 2, then RNE_p(RO_q(x)) = RNE_p(x). float64 has
q = 53, so any target with p <= 51 significand bits is rounded exactly once from z.
The numerics hazards lab and the GEMM emulation both accumulate this way.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from precisionlab.formats import FloatFormat, Format, get_format

MAX_EXACT_SIGNIFICAND = 51
"""Widest significand (p = M + 1) a round-to-odd float64 sum rounds to exactly: p + 2 <= 53."""


def accumulator_format(spec: str | Format) -> FloatFormat:
    """A signed float format with subnormals and at most 51 significand bits (fp32, fp16, bf16,
    e8m13, ...): what an exactly emulated accumulator can be. ValueError says what is missing."""
    fmt = get_format(spec)
    if not isinstance(fmt, FloatFormat):
        raise ValueError(f"{fmt.name} is an integer format; an accumulator must be a float format")
    if not fmt.signed or not fmt.subnormals:
        raise ValueError(f"{fmt.name} is unsigned or has no subnormals; an accumulator needs a signed float format")
    if fmt.man_bits + 1 > MAX_EXACT_SIGNIFICAND:
        raise ValueError(f"{fmt.name} has {fmt.man_bits + 1} significant bits; at most {MAX_EXACT_SIGNIFICAND} "
                         "can be emulated exactly in float64 (fp64 itself is native float64)")
    return fmt


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo): hi = fl(a + b) in float64 and lo = (a + b) - hi, exactly."""
    hi = a + b
    b_virtual = hi - a
    a_virtual = hi - b_virtual
    lo = (a - a_virtual) + (b - b_virtual)
    return hi, lo


def round_to_odd(hi: npt.ArrayLike, lo: npt.ArrayLike) -> np.ndarray:
    """hi + lo (with hi = fl(hi + lo)) rounded to odd in float64.

    Exact (lo == 0): hi. Inexact: truncate toward zero (step hi one ulp toward zero when
    lo points that way), then set the last significand bit.
    """
    hi = np.asarray(hi, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    inexact = (lo != 0) & np.isfinite(hi)  # an overflowed sum stays inf
    toward_zero = inexact & (np.signbit(lo) != np.signbit(hi))
    bits = (hi.view(np.int64) - toward_zero) | inexact  # booleans act as 0 / 1
    return bits.view(np.float64)


def odd_sum(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    """a + b rounded to odd in float64: round it once more to any p <= 51 format for an exact RNE sum."""
    hi, lo = two_sum(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return round_to_odd(hi, lo)
