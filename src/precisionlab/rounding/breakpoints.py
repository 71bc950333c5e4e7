"""Where a format's rounding can change value: its breakpoint candidates.

Under a deterministic rounding mode, round(x) is a step function of x. A step can sit only at

    a member of the format                  (directed modes step there)
    the midpoint of two neighbouring members (nearest modes step there)
    the midpoint above ±max_finite           (nearest modes overflow there: max + ulp(max) / 2)
    the first value past ±max_finite          (max + ulp(max): to-odd overflows there)
    0 and ±inf                               (sign, no-zero formats, unsigned formats, specials)
    the negatives of all of these            (unsigned formats round a negative first: to 0, or
                                              to a magnitude it has no code for)

so round(x) is constant on every open interval between consecutive candidates. The fast
paths rely on this: `search` tabulates the steps for a binary search, and `table_kernels`
checks that every candidate is a bf16 number before it trusts the 2^17-entry table (whose
entries are exactly the bf16 numbers and the open intervals between them).

Only formats of at most 16 bits are tabulated (at most 2^16 members).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from precisionlab.formats import FloatFormat, IntFormat
from precisionlab.rounding.codes import decode_table

MAX_BITS = 16
"""Widest format whose candidates are listed (2^16 members and as many midpoints)."""


@lru_cache(maxsize=64)
def candidates(fmt: FloatFormat | IntFormat, to_odd: bool = True) -> np.ndarray | None:
    """Sorted, distinct float64 candidates (read-only), or None for a format wider than MAX_BITS.
    to_odd=False leaves out ±(max + ulp(max)), where only to-odd rounding steps.

    Every candidate is exact in float64: members have at most 17 significant bits and their
    midpoints one more."""
    if fmt.bits > MAX_BITS:
        return None
    if isinstance(fmt, IntFormat):
        members = np.arange(fmt.min_value, fmt.max_value + 1, dtype=np.float64)
        top = [members[0] - 0.5, members[-1] + 0.5]
    else:
        values = np.asarray(decode_table(fmt), dtype=np.float64)
        members = distinct(values[np.isfinite(values)])
        half_ulp = math.ldexp(1.0, fmt.emax - fmt.man_bits - 1)
        beyond, next_up = fmt.max_finite + half_ulp, fmt.max_finite + 2 * half_ulp
        top = [-beyond, beyond, -next_up, next_up] if to_odd else [-beyond, beyond]
    midpoints = (members[:-1] + members[1:]) / 2
    steps = np.concatenate([members, midpoints, top])
    # mirrored for unsigned formats too: a negative that rounds to zero becomes 0, one that
    # rounds to a nonzero magnitude has no code, so the negative side steps at -midpoints
    found = distinct(np.concatenate([steps, -steps, [0.0, -math.inf, math.inf]])) + 0.0  # zero as +0
    found.flags.writeable = False
    return found


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (-0.0 and 0.0 count as one); a sort and a compare, faster here than
    np.unique's hashing."""
    ordered = np.sort(values)
    keep = np.ones(ordered.size, dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def reachable(values: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """The candidates an input of dtype can reach: ±inf and those within dtype's finite range (a
    breakpoint past float32's largest value, such as bf16's max + ulp = 2^128, is one no float32
    input lies beyond but inf)."""
    return values[(np.abs(values) <= float(np.finfo(dtype).max)) | np.isinf(values)]


def exact_in(values: np.ndarray, dtype: type[np.floating]) -> np.ndarray | None:
    """values (float64) as dtype when every one is exactly representable there, else None."""
    with np.errstate(over="ignore", under="ignore"):
        narrowed = values.astype(dtype)
    if not np.array_equal(narrowed.astype(np.float64), values):
        return None
    return narrowed


def all_bf16(values: np.ndarray) -> bool:
    """True when every value is a bf16 number (a float32 whose low 16 bits are zero)."""
    as32 = exact_in(values, np.float32)
    return as32 is not None and not (as32.view(np.uint32) & np.uint32(0xFFFF)).any()
