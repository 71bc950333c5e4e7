"""Where a format's rounding can change value: its breakpoint candidates.

Under a deterministic rounding mode, round(x) is a step function of x. A step can sit only at

    a member of the format                  (directed modes step there)
    the midpoint of two neighbouring members (nearest modes step there)
    the midpoint above ±max_finite           (nearest modes overflow there: max + ulp(max) / 2)
    0 and ±inf                               (sign, no-zero formats, unsigned formats, specials)

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
def candidates(fmt: FloatFormat | IntFormat) -> np.ndarray | None:
    """Sorted, distinct float64 candidates (read-only), or None for a format wider than MAX_BITS.

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
        beyond = fmt.max_finite + math.ldexp(1.0, fmt.emax - fmt.man_bits - 1)
        top = [-beyond, beyond]
    midpoints = (members[:-1] + members[1:]) / 2
    found = distinct(np.concatenate([members, midpoints, top, [0.0, -math.inf, math.inf]]))
    found.flags.writeable = False
    return found


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (-0.0 and 0.0 count as one); a sort and a compare, faster here than
    np.unique's hashing."""
    ordered = np.sort(values)
    keep = np.ones(ordered.size, dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


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
